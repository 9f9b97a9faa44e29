/*
 * lockdemo: processes contending for one lock, for each strategy.
 *
 * Usage: lockdemo [processes] [cycles] [directory]
 *
 * The strategies are every scheme of lockcore's own list (`Scheme::ALL`,
 * written into lockcore_schemes.h by build.rs), so a new one shows here
 * without a change. For each, forks `processes` children (default 8); each takes the
 * lock `cycles` times (default 200), and inside it reads a counter file, adds
 * one and writes it back: the read-modify-write a CGI program does on its
 * data file. A counter in shared memory catches two processes inside at once.
 * The final count must equal processes x cycles, with no overlap. A strategy
 * that cannot work in the directory (`shm` and `toplock` on NFS or FUSE)
 * answers LOCK_ERR_UNSUPPORTED at its first acquisition: its row says so, and
 * it does not count as a failure.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lockcore_schemes.h"
#include "lockffi.h"

#define DEMO_SCHEME(name, target, lock, guard, breaks_stale_locks, keeps_a_queue) name,
static const char *const SCHEMES[] = {LOCKCORE_SCHEMES(DEMO_SCHEME)};
#undef DEMO_SCHEME
#define SCHEME_COUNT (sizeof SCHEMES / sizeof SCHEMES[0])

struct shared {
    int inside;      /* processes in the critical section right now */
    int overlaps;    /* times a process found someone else inside */
    int told;        /* whether `why` holds a child's reason yet */
    char why[512];   /* why the strategy cannot work here, told by the first child to find out */
};

/* A child's exit status when the strategy cannot work in this directory. */
#define NOT_HERE 3

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long read_counter(const char *path) {
    FILE *f = fopen(path, "r");
    long value = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld", &value) != 1) value = -1;
        fclose(f);
    }
    return value;
}

static int write_counter(const char *path, long value) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f, "%ld\n", value);
    return fclose(f);
}

/* One child: `cycles` critical sections. Exit status 0 on success. */
static int contend(const char *spec, const char *counter, int cycles, struct shared *shared) {
    lock_handle *lock = NULL;
    lock_result rc = lock_open(spec, &lock);
    if (rc != LOCK_OK) {
        fprintf(stderr, "lock_open(%s): %s\n", spec, lock_strerror(rc));
        return 1;
    }
    for (int i = 0; i < cycles; i++) {
        rc = lock_acquire(lock, 60000, NULL);
        if (rc == LOCK_ERR_UNSUPPORTED && i == 0) {
            if (__atomic_exchange_n(&shared->told, 1, __ATOMIC_SEQ_CST) == 0) {
                lock_last_error_message(shared->why, sizeof shared->why);
            }
            lock_close(lock);
            return NOT_HERE;
        }
        if (rc != LOCK_OK) {
            char why[256];
            lock_last_error_message(why, sizeof why);
            fprintf(stderr, "lock_acquire(%s): %s (%s)\n", spec, lock_strerror(rc), why);
            lock_close(lock);
            return 1;
        }
        if (__atomic_add_fetch(&shared->inside, 1, __ATOMIC_SEQ_CST) != 1) {
            __atomic_add_fetch(&shared->overlaps, 1, __ATOMIC_SEQ_CST);
        }
        long value = read_counter(counter);
        write_counter(counter, value + 1);
        __atomic_sub_fetch(&shared->inside, 1, __ATOMIC_SEQ_CST);
        rc = lock_release(lock, 0);
        if (rc != LOCK_OK) {
            char why[256];
            lock_last_error_message(why, sizeof why);
            fprintf(stderr, "lock_release(%s): %s (%s)\n", spec, lock_strerror(rc), why);
            lock_close(lock);
            return 1;
        }
    }
    rc = lock_close(lock);
    if (rc != LOCK_OK) {
        fprintf(stderr, "lock_close(%s): %s\n", spec, lock_strerror(rc));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int processes = argc > 1 ? atoi(argv[1]) : 8;
    int cycles = argc > 2 ? atoi(argv[2]) : 200;
    char dir[512];
    if (argc > 3) {
        snprintf(dir, sizeof dir, "%s", argv[3]);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/lockdemo-XXXXXX", tmp != NULL ? tmp : "/tmp");
        if (mkdtemp(dir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
    }
    if (processes < 1 || cycles < 1) {
        fprintf(stderr, "usage: %s [processes >= 1] [cycles >= 1] [directory]\n", argv[0]);
        return 2;
    }

    struct shared *shared =
        mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }

    int failures = 0;

    printf("lock library %s: %d processes x %d read-increment-write cycles, in %s\n\n", lock_version(),
           processes, cycles, dir);
    printf("| strategy | count    | expected | overlaps | seconds | acquisitions/s |\n");
    printf("|----------|----------|----------|----------|---------|----------------|\n");
    for (size_t s = 0; s < SCHEME_COUNT; s++) {
        /* the counter file is the target: the file a CGI program protects
         * (lockfile keeps its lock beside it, flock locks it itself); the
         * other schemes' locks are paths of their own beside it */
        char spec[1100], counter[1024];
        snprintf(counter, sizeof counter, "%s/counter-%s.txt", dir, SCHEMES[s]);
        bool beside = strcmp(SCHEMES[s], "lockfile") == 0 || strcmp(SCHEMES[s], "flock") == 0;
        snprintf(spec, sizeof spec, "%s:%s%s", SCHEMES[s], counter, beside ? "" : ".lock");
        write_counter(counter, 0);
        shared->inside = 0;
        shared->overlaps = 0;
        shared->told = 0;

        double start = now_seconds();
        for (int p = 0; p < processes; p++) {
            pid_t pid = fork();
            if (pid == 0) _exit(contend(spec, counter, cycles, shared));
            if (pid < 0) {
                perror("fork");
                return 1;
            }
        }
        int child_failures = 0, not_here = 0, status;
        while (wait(&status) > 0) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == NOT_HERE) {
                not_here++;
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                child_failures++;
            }
        }
        double seconds = now_seconds() - start;
        if (not_here == processes) {
            printf("| %-8s | not here: %s |\n", SCHEMES[s], shared->why);
            continue;
        }
        child_failures += not_here;

        long count = read_counter(counter);
        long expected = (long)processes * cycles;
        printf("| %-8s | %8ld | %8ld | %8d | %7.2f | %14.0f |\n", SCHEMES[s], count, expected, shared->overlaps,
               seconds, (double)expected / seconds);
        if (count != expected || shared->overlaps != 0 || child_failures != 0) failures++;
    }
    printf("\n%s\n", failures == 0 ? "every count is exact and no two processes were ever inside at once"
                                   : "FAILED: a count is wrong, processes overlapped, or a child failed");
    return failures == 0 ? 0 : 1;
}
