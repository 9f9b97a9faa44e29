/*
 * counter.c: many processes, one plain-text counter file, one lock.
 *
 * Usage: c_counter [strategy|all] [processes] [cycles]
 *   or set LOCKFFI_COUNTER_PROCESSES / LOCKFFI_COUNTER_CYCLES (arguments win).
 * Default: every strategy of lockcore's list (lockcore::Scheme::ALL, through
 * harness.h), 16 processes x 200 cycles.
 *
 * For each strategy, forks the processes; each opens its own handle and does
 * `cycles` times: lock_acquire (60 s budget), open the counter file, read the
 * number, write number + 1, close, lock_release. The read-modify-write is
 * what a CGI program does on its data file; without the lock, updates are
 * lost. Shared memory (MAP_SHARED | MAP_ANONYMOUS) catches two processes
 * inside at once, and records each section's fence at the index of the count
 * it read, so the fences can be checked to increase in count order.
 *
 * Prints one line per strategy and PASSED/FAILED test_counter_<strategy>;
 * exits 1 if any failed.
 */
/* MAP_ANONYMOUS is not in POSIX 2008 (build.rs defines this too). */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1
#endif

#include <sys/mman.h>

#include "harness.h"

struct shared {
    int inside;        /* processes between acquire and release right now */
    int overlaps;      /* entries that found someone else inside */
    int out_of_range;  /* counts read that were negative, unreadable or too large */
    int reused_slots;  /* counts read twice: a lost update */
    int zero_fences;   /* acquisitions that got fence 0 */
    uint64_t fences[]; /* fences[n]: the fence of the section that read n */
};

static long read_counter(const char *path) {
    char text[32];
    ssize_t n = read_file(path, text, sizeof text);
    if (n <= 0) return -1;
    char *end;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\n') return -1;
    return value;
}

static bool write_counter(const char *path, long value) {
    char text[32];
    int len = snprintf(text, sizeof text, "%ld\n", value);
    return write_file(path, text, (size_t)len, 0644);
}

/* One process: `cycles` critical sections. */
static bool contend(const char *spec, const char *counter, int cycles, long total, struct shared *shared) {
    lock_handle *h = NULL;
    CHECK_RC(lock_open(spec, &h), LOCK_OK);
    for (int i = 0; i < cycles; i++) {
        uint64_t fence = 0;
        CHECK_RC(lock_acquire(h, 60000, &fence), LOCK_OK);
        if (fence == 0) __atomic_add_fetch(&shared->zero_fences, 1, __ATOMIC_SEQ_CST);
        if (__atomic_add_fetch(&shared->inside, 1, __ATOMIC_SEQ_CST) != 1) {
            __atomic_add_fetch(&shared->overlaps, 1, __ATOMIC_SEQ_CST);
        }
        long value = read_counter(counter);
        if (value < 0 || value >= total) {
            __atomic_add_fetch(&shared->out_of_range, 1, __ATOMIC_SEQ_CST);
        } else {
            uint64_t expected = 0;
            if (!__atomic_compare_exchange_n(&shared->fences[value], &expected, fence, false, __ATOMIC_SEQ_CST,
                                             __ATOMIC_SEQ_CST)) {
                __atomic_add_fetch(&shared->reused_slots, 1, __ATOMIC_SEQ_CST);
            }
        }
        bool written = write_counter(counter, value + 1);
        __atomic_sub_fetch(&shared->inside, 1, __ATOMIC_SEQ_CST);
        CHECK_MSG(written, "cannot write %s: %s", counter, strerror(errno));
        CHECK_RC(lock_release(h, 0), LOCK_OK);
    }
    lock_close(h);
    return true;
}

static long positive(const char *text, const char *what) {
    char *end;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value > 100000) {
        fprintf(stderr, "counter: %s must be a number from 1 to 100000, not \"%s\"\n", what, text);
        exit(2);
    }
    return value;
}

/* One strategy; prints its line. */
static bool run_strategy(const struct strategy *s, long processes, long cycles) {
    long total = processes * cycles;
    char dir[HARNESS_PATH_MAX], spec[HARNESS_PATH_MAX + 64], counter[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, s->name));
    make_spec(spec, sizeof spec, s, dir, NULL);
    path_join(counter, sizeof counter, dir, "counter.txt");
    CHECK(write_counter(counter, 0));

    size_t size = sizeof(struct shared) + (size_t)total * sizeof(uint64_t);
    struct shared *shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK_MSG(shared != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(shared, 0, size);

    double start = mono_seconds();
    long started = 0;
    pid_t *pids = calloc((size_t)processes, sizeof *pids);
    CHECK(pids != NULL);
    for (long p = 0; p < processes; p++) {
        pid_t pid = fork_child();
        if (pid == 0) {
            alarm(600); /* a child stuck in the library ends, and the run with it */
            child_exit(contend(spec, counter, (int)cycles, total, shared));
        }
        if (pid < 0) break;
        pids[started++] = pid;
    }
    int failed_children = 0;
    for (long p = 0; p < started; p++) {
        int status = wait_child(pids[p]);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
    }
    double seconds = mono_seconds() - start;
    free(pids);

    long count = read_counter(counter);
    /* fences in count order: every slot filled, strictly increasing */
    long unfilled = 0, out_of_order = 0, first_bad = -1;
    for (long i = 0; i < total; i++) {
        if (shared->fences[i] == 0) {
            unfilled++;
        } else if (i > 0 && shared->fences[i - 1] != 0 && shared->fences[i] <= shared->fences[i - 1]) {
            out_of_order++;
            if (first_bad < 0) first_bad = i;
        }
    }
    printf("%-8s | %ld processes x %ld cycles | count %ld of %ld | overlaps %d | fences %s | %.2f s | %.0f "
           "acquisitions/s\n",
           s->name, processes, cycles, count, total, shared->overlaps,
           unfilled == 0 && out_of_order == 0 ? "strictly increasing" : "NOT strictly increasing", seconds,
           (double)total / seconds);
    fflush(stdout);

    int overlaps = shared->overlaps, out_of_range = shared->out_of_range, reused = shared->reused_slots;
    int zero_fences = shared->zero_fences;
    uint64_t bad_prev = first_bad > 0 ? shared->fences[first_bad - 1] : 0;
    uint64_t bad = first_bad >= 0 ? shared->fences[first_bad] : 0;
    munmap(shared, size);
    CHECK_MSG(started == processes, "only %ld of %ld processes could be forked", started, processes);
    CHECK_MSG(failed_children == 0, "%d processes failed (printed above)", failed_children);
    CHECK_MSG(count == total, "the counter is %ld, expected %ld: updates were lost", count, total);
    CHECK_MSG(overlaps == 0, "%d times a process entered while another was inside", overlaps);
    CHECK_MSG(out_of_range == 0 && reused == 0, "%d counts read out of range, %d read twice", out_of_range, reused);
    CHECK_MSG(zero_fences == 0, "%d acquisitions got fence 0", zero_fences);
    CHECK_MSG(unfilled == 0, "%ld counts were never read inside the lock", unfilled);
    CHECK_MSG(out_of_order == 0,
              "%ld fences not above their predecessor, first at count %ld: %" PRIu64 " after %" PRIu64, out_of_order,
              first_bad, bad, bad_prev);
    return true;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : "all";
    const char *env_processes = getenv("LOCKFFI_COUNTER_PROCESSES");
    const char *env_cycles = getenv("LOCKFFI_COUNTER_CYCLES");
    long processes = argc > 2 ? positive(argv[2], "processes")
                     : env_processes != NULL ? positive(env_processes, "LOCKFFI_COUNTER_PROCESSES")
                                             : 16;
    long cycles = argc > 3 ? positive(argv[3], "cycles")
                  : env_cycles != NULL ? positive(env_cycles, "LOCKFFI_COUNTER_CYCLES")
                                       : 200;
    if (strcmp(only, "all") != 0 && strategy_named(only) == NULL) {
        fprintf(stderr, "usage: %s [", argv[0]);
        for (size_t i = 0; i < STRATEGY_COUNT; i++) fprintf(stderr, "%s|", STRATEGIES[i].name);
        fprintf(stderr, "all] [processes] [cycles]\n");
        return 2;
    }
    umask(022);
    if (!harness_make_root("counter")) return 1;
    printf("lock library %s: %ld processes x %ld read-increment-write cycles of a counter file, in %s\n",
           lock_version(), processes, cycles, harness_root);
    int failed = 0;
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        const struct strategy *s = &STRATEGIES[i];
        if (strcmp(only, "all") != 0 && strcmp(only, s->name) != 0) continue;
        harness_why[0] = '\0';
        harness_why_len = 0;
        bool ok = run_strategy(s, processes, cycles);
        if (ok) {
            printf("PASSED test_counter_%s\n", s->name);
        } else {
            printf("FAILED test_counter_%s: %s\n", s->name, harness_why);
            failed++;
        }
        fflush(stdout);
    }
    if (failed == 0) {
        remove_tree(harness_root);
    } else {
        printf("kept %s for inspection\n", harness_root);
    }
    return failed == 0 ? 0 : 1;
}
