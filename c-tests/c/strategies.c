/*
 * strategies.c: what the lease strategies (symlink, lease, toplock) brought
 * to the C API, for every strategy: lock_commit, lock_autorenew and release
 * with a cooldown; and what only one strategy does: the symlink lock's mtime
 * moved by coreutils `touch -h`, the lease file and its `signal=` option,
 * toplock's first-come-first-served queue.
 *
 * Usage: c_strategies [name-filter]
 *
 * Each case prints `PASSED test_xxx` or `FAILED test_xxx: <why>`; the exit
 * status is 1 if any failed. Other processes and the watchdog thread are
 * synchronised with pipes, waitpid() and lock_inspect(); sleeps only let a
 * TTL or a cooldown run out.
 */
/* MAP_ANONYMOUS is not in POSIX 2008 (build.rs defines this too). */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1
#endif

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "harness.h"

#define FENCE_SENTINEL UINT64_C(0x5EA15EA15EA15EA1)

/* The whole content of a file and its inode, to show it was not replaced. */
struct snapshot {
    char bytes[256];
    ssize_t len;
    ino_t inode;
    struct timespec mtime;
};

static bool take_snapshot(const char *path, struct snapshot *out) {
    struct stat st;
    CHECK_MSG(lstat(path, &st) == 0, "lstat(%s): %s", path, strerror(errno));
    out->inode = st.st_ino;
    out->mtime = st.st_mtim;
    out->len = read_file(path, out->bytes, sizeof out->bytes);
    CHECK_MSG(out->len >= 0, "cannot read %s", path);
    return true;
}

/* Fails unless `path` is byte for byte, inode and mtime, what `before` saw. */
static bool unchanged(const char *path, const struct snapshot *before, const char *when) {
    struct snapshot now;
    if (!take_snapshot(path, &now)) return false;
    CHECK_MSG(now.len == before->len && memcmp(now.bytes, before->bytes, (size_t)now.len) == 0,
              "%s: %s now holds \"%.40s\" instead of \"%.40s\"", when, path, now.bytes, before->bytes);
    CHECK_MSG(now.inode == before->inode && now.mtime.tv_sec == before->mtime.tv_sec &&
                  now.mtime.tv_nsec == before->mtime.tv_nsec,
              "%s: %s was replaced or touched (inode %lu, was %lu)", when, path, (unsigned long)now.inode,
              (unsigned long)before->inode);
    return true;
}

static bool has_content(const char *path, const char *expected) {
    char buf[256];
    ssize_t n = read_file(path, buf, sizeof buf);
    CHECK_MSG(n == (ssize_t)strlen(expected) && strcmp(buf, expected) == 0, "%s holds \"%s\" (%zd bytes), not \"%s\"",
              path, n >= 0 ? buf : "", n, expected);
    return true;
}

/* ------------------------------------------------------------------------ */
/* lock_commit                                                              */
/* ------------------------------------------------------------------------ */

struct commit_paths {
    char target[HARNESS_PATH_MAX], temp[HARNESS_PATH_MAX];
};

static bool commit_setup(const char *dir, struct commit_paths *p, struct snapshot *target_before) {
    path_join(p->target, sizeof p->target, dir, "resource.txt");
    path_join(p->temp, sizeof p->temp, dir, "resource.txt.new");
    CHECK(write_text(p->target, "old contents\n"));
    CHECK(write_text(p->temp, "new contents\n"));
    return take_snapshot(p->target, target_before);
}

/* While held: the temp file replaces the target (by rename: the temp is
 * gone); the lock stays held; bad arguments change nothing. */
static bool commit_while_held(const struct strategy *s, const char *dir) {
    struct commit_paths p;
    struct snapshot before;
    if (!commit_setup(dir, &p, &before)) return false;
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=30s");
    OPEN(other, s, dir, NULL);

    /* not held: refused, nothing renamed */
    CHECK_RC(lock_commit(h, p.temp, p.target), LOCK_ERR_NOT_HELD);
    if (!unchanged(p.target, &before, "a commit without the lock")) return false;
    CHECK(has_content(p.temp, "new contents\n"));

    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    /* NULL paths, with the lock held */
    CHECK_RC(lock_commit(h, NULL, p.target), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_commit(h, p.temp, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_commit(h, NULL, NULL), LOCK_ERR_NULL_ARGUMENT);
    if (!unchanged(p.target, &before, "a commit with a NULL path")) return false;
    /* an empty path is no path: refused naming the argument, nothing renamed */
    CHECK_RC(lock_commit(h, "", p.target), LOCK_ERR_INVALID_ARGUMENT);
    char said[1024];
    lock_last_error_message(said, sizeof said);
    CHECK_MSG(strstr(said, "temp_path is empty") != NULL, "an empty temp path is refused saying \"%s\"", said);
    CHECK_RC(lock_commit(h, p.temp, ""), LOCK_ERR_INVALID_ARGUMENT);
    lock_last_error_message(said, sizeof said);
    CHECK_MSG(strstr(said, "target_path is empty") != NULL, "an empty target path is refused saying \"%s\"", said);
    if (!unchanged(p.target, &before, "a commit with an empty path")) return false;
    CHECK_MSG(path_exists(p.temp), "a commit with an empty target renamed the temp file");
    /* a temp file that does not exist: LOCK_ERR_COMMIT with rename's errno,
     * the target untouched, the lock still held */
    char missing[HARNESS_PATH_MAX];
    path_join(missing, sizeof missing, dir, "no-such-temp");
    errno = 0;
    CHECK_RC(lock_commit(h, missing, p.target), LOCK_ERR_COMMIT);
    CHECK_MSG(errno == ENOENT, "errno after a commit of a missing temp file: %d, expected ENOENT", errno);
    if (!unchanged(p.target, &before, "a commit of a missing temp file")) return false;
    /* the lock's own file as target: refused, nothing renamed */
    char lock_file[HARNESS_PATH_MAX];
    path_join(lock_file, sizeof lock_file, dir, s->lock_name);
    CHECK_RC(lock_commit(h, p.temp, lock_file), LOCK_ERR_INVALID_ARGUMENT);
    CHECK_MSG(path_exists(p.temp), "a commit onto the lock's own file renamed the temp file");

    CHECK_RC(lock_commit(h, p.temp, p.target), LOCK_OK);
    if (!has_content(p.target, "new contents\n")) return false;
    CHECK_MSG(!path_exists(p.temp), "the temp file remains after a commit (it must be renamed, not copied)");

    /* the lock is still held, with the same fence; a second commit works,
     * also onto a target that did not exist */
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && info.fence == fence && info.owner_pid == (int32_t)getpid(),
              "after a commit: held %d, fence %" PRIu64 " (acquired %" PRIu64 ")", (int)info.held, info.fence, fence);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
    char fresh[HARNESS_PATH_MAX];
    path_join(fresh, sizeof fresh, dir, "fresh.txt");
    CHECK(write_text(p.temp, "second\n"));
    CHECK_RC(lock_commit(h, p.temp, fresh), LOCK_OK);
    if (!has_content(fresh, "second\n")) return false;

    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK(write_text(p.temp, "third\n"));
    CHECK_RC(lock_commit(h, p.temp, p.target), LOCK_ERR_NOT_HELD);
    if (!has_content(p.target, "new contents\n")) return false;
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_commit_while_held(void) {
    return for_each_strategy(commit_while_held);
}

/* After losing the lock (a 100 ms TTL overrun, another handle took it):
 * LOCK_LOST, target byte-identical, temp left; the handle holds nothing.
 * The new holder's own commit goes through. */
static bool commit_after_lost(const struct strategy *s, const char *dir) {
    if (s->ttl_is_advisory) {
        SKIP_STRATEGY(s, "a flock cannot be lost: nobody takes a live holder's kernel lock, whatever its advisory TTL "
                         "(its commit past the TTL is test_commit_after_expiry)");
    }
    struct commit_paths p;
    struct snapshot before;
    if (!commit_setup(dir, &p, &before)) return false;
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, "ttl=100ms");
    OPEN(b, s, dir, NULL);
    uint64_t fa = 0, fb = 0;
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK); /* takes over the expired lock */
    CHECK_MSG(fb > fa, "fence %" PRIu64 " after %" PRIu64, fb, fa);

    CHECK_RC(lock_commit(a, p.temp, p.target), LOCK_LOST);
    if (!unchanged(p.target, &before, "a lost commit")) return false;
    CHECK_MSG(has_content(p.temp, "new contents\n"), "a lost commit took the temp file");
    CHECK_RC(lock_release(a, 0), LOCK_ERR_NOT_HELD); /* LOST: the handle holds nothing */
    CHECK_RC(lock_commit(a, p.temp, p.target), LOCK_ERR_NOT_HELD);
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == fb, "the lost commit disturbed the new holder");

    CHECK_RC(lock_commit(b, p.temp, p.target), LOCK_OK);
    if (!has_content(p.target, "new contents\n")) return false;
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    return true;
}

static bool test_commit_after_lost(void) {
    return for_each_strategy(commit_after_lost);
}

/* Past the TTL with nobody taking it: LOCK_EXPIRED, nothing renamed, and the
 * handle still holds; once prolonged, the commit goes through. */
static bool commit_after_expiry(const struct strategy *s, const char *dir) {
    struct commit_paths p;
    struct snapshot before;
    if (!commit_setup(dir, &p, &before)) return false;
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=100ms");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_commit(h, p.temp, p.target), LOCK_EXPIRED);
    if (!unchanged(p.target, &before, "an expired commit")) return false;
    CHECK_MSG(has_content(p.temp, "new contents\n"), "an expired commit took the temp file");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && info.held_by_this_handle && info.stale == !s->ttl_is_advisory,
              "after an expired commit: held %d, by this %d, stale %d", (int)info.held,
              (int)info.held_by_this_handle, (int)info.stale);
    CHECK_RC(lock_prolong(h, 30000), LOCK_EXPIRED); /* held again, for 30 s */
    CHECK_RC(lock_commit(h, p.temp, p.target), LOCK_OK);
    if (!has_content(p.target, "new contents\n")) return false;
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_commit_after_expiry(void) {
    return for_each_strategy(commit_after_expiry);
}

/* ------------------------------------------------------------------------ */
/* lock_autorenew                                                           */
/* ------------------------------------------------------------------------ */

/* What the lost callback saw; `calls` is atomic (the watchdog's thread). */
struct lost_log {
    struct lost_log *self;
    int calls;
    int wrong_context;
    int pipe_w;
};

static void on_lost(void *context) {
    struct lost_log *log = context;
    if (log == NULL || log->self != log) {
        if (log != NULL) __atomic_store_n(&log->wrong_context, 1, __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_add_fetch(&log->calls, 1, __ATOMIC_SEQ_CST);
    char byte = 'L';
    if (write(log->pipe_w, &byte, 1) != 1) __atomic_store_n(&log->wrong_context, 2, __ATOMIC_SEQ_CST);
}

static bool lost_log_init(struct lost_log *log, int fds[2]) {
    memset(log, 0, sizeof *log);
    log->self = log;
    CHECK(pipe(fds) == 0);
    log->pipe_w = fds[1];
    return true;
}

/* Waits up to `ms` for the callback's byte on the pipe; true if it came. */
static bool wait_for_byte(int fd, int ms) {
    int64_t deadline = mono_ms() + ms;
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left < 0) left = 0;
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, (int)left);
        if (n > 0) {
            char byte;
            return read(fd, &byte, 1) == 1;
        }
        if (n == 0) return false;
        if (errno != EINTR) return false;
    }
}

/* Refusals: NOT_HELD without a lock, UNSUPPORTED without a ttl and for
 * flock; a started watchdog can be stopped (and stopping none is fine). */
static bool autorenew_refusals(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *untimed = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(untimed, s, dir, NULL);
    CHECK_RC(lock_autorenew(h, on_lost, NULL), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_autorenew_stop(h), LOCK_OK); /* nothing to stop */

    CHECK_RC(lock_try_acquire(untimed, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(untimed, on_lost, NULL), LOCK_ERR_UNSUPPORTED); /* nothing expires */
    char message[1024];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(strstr(message, "without a ttl") != NULL && strstr(message, dir) != NULL,
              "the refusal of a lock without a ttl says \"%s\"", message);
    CHECK_RC(lock_release(untimed, 0), LOCK_OK);

    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    if (s->ttl_is_advisory) {
        /* the kernel holds a flock until release: nothing to renew */
        CHECK_RC(lock_autorenew(h, on_lost, NULL), LOCK_ERR_UNSUPPORTED);
        lock_last_error_message(message, sizeof message);
        CHECK_MSG(strstr(message, "held by the kernel") != NULL, "the refusal of a flock lock says \"%s\"", message);
    } else {
        CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK); /* without a callback */
        CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK); /* again: replaces the running one */
        CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
        CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
        lock_info info;
        CHECK_RC(lock_inspect(h, &info), LOCK_OK);
        CHECK_MSG(info.held_by_this_handle, "lock_autorenew_stop let go of the lock");
    }
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_autorenew(h, on_lost, NULL), LOCK_ERR_NOT_HELD);
    CLOSE(h);
    CLOSE(untimed);
    return true;
}

static bool test_autorenew_refusals(void) {
    return for_each_strategy(autorenew_refusals);
}

/* ttl=300ms, renewed: after 1.2 s (4 TTLs) the lock is still ours, another
 * handle is busy, and release is LOCK_OK, not LOCK_EXPIRED. Then, renewal
 * stopped, the lock does run out. */
static bool autorenew_keeps_lock(const struct strategy *s, const char *dir) {
    if (s->ttl_is_advisory) {
        SKIP_STRATEGY(s, "lock_autorenew is LOCK_ERR_UNSUPPORTED for flock (test_autorenew_refusals)");
    }
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    struct lost_log log;
    int fds[2];
    if (!lost_log_init(&log, fds)) return false;

    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_autorenew(h, on_lost, &log), LOCK_OK);
    sleep_ms(1200);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    int64_t now = unix_ms();
    CHECK_MSG(info.held && !info.stale && info.fence == fence && info.expires_unix_ms > now &&
                  info.expires_unix_ms <= now + 300 + 5,
              "after 4 TTLs of renewal: held %d, stale %d, fence %" PRIu64 " (%" PRIu64 "), expires %" PRId64
              " ms from now",
              (int)info.held, (int)info.stale, info.fence, fence, info.expires_unix_ms - now);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_MSG(__atomic_load_n(&log.calls, __ATOMIC_SEQ_CST) == 0, "the lost callback fired for a lock never lost");

    /* stopped: nothing renews it; past its TTL another handle takes it */
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_autorenew(h, on_lost, &log), LOCK_OK);
    CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
    sleep_ms(450);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && info.stale, "after the watchdog stopped and 1.5 TTLs: held %d, stale %d", (int)info.held,
              (int)info.stale);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_LOST);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CHECK_MSG(__atomic_load_n(&log.calls, __ATOMIC_SEQ_CST) == 0 && log.wrong_context == 0,
              "the lost callback fired after lock_autorenew_stop");
    close(fds[0]);
    close(fds[1]);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_autorenew_keeps_lock(void) {
    return for_each_strategy(autorenew_keeps_lock);
}

/* The watchdog finds the lock broken (lock_break from another handle, as an
 * operator would): the callback fires once, with its context, within 2 s.
 * Then lock_autorenew_stop, and release reports the lock lost. */
static bool autorenew_reports_loss(const struct strategy *s, const char *dir) {
    if (s->ttl_is_advisory) {
        SKIP_STRATEGY(s, "a flock can be neither renewed (LOCK_ERR_UNSUPPORTED) nor broken; nothing to lose");
    }
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    struct lost_log log;
    int fds[2];
    if (!lost_log_init(&log, fds)) return false;
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, on_lost, &log), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(other, &was_held), LOCK_OK);
    CHECK_MSG(was_held, "lock_break found no lock to break");
    int64_t start = mono_ms();
    bool fired = wait_for_byte(fds[0], 2000);
    int64_t waited = mono_ms() - start;
    CHECK_MSG(fired, "the lost callback did not fire within 2 s of the break (calls %d)",
              __atomic_load_n(&log.calls, __ATOMIC_SEQ_CST));
    CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
    CHECK_MSG(__atomic_load_n(&log.calls, __ATOMIC_SEQ_CST) == 1 && log.wrong_context == 0,
              "the callback ran %d times (wrong context: %d)", __atomic_load_n(&log.calls, __ATOMIC_SEQ_CST),
              log.wrong_context);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held, "the watchdog took the broken lock again (held %d, pid %d)", (int)info.held,
              (int)info.owner_pid);
    lock_result released = lock_release(h, 0);
    CHECK_MSG(released == LOCK_LOST, "release after the break the callback reported (%" PRId64 " ms) returned %s",
              waited, rc_name(released));
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    close(fds[0]);
    close(fds[1]);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_autorenew_reports_loss(void) {
    return for_each_strategy(autorenew_reports_loss);
}

/* The watchdog's first renewal comes at once, not a third of the TTL after
 * lock_autorenew (a watchdog started late in a TTL would otherwise let it
 * run out). With a 30 s TTL the old behaviour renews after 10 s; the test
 * waits 5 s at most for the expiry on disk to move, so neither the
 * machine's speed nor valgrind can decide it. The 20 ms pause only makes
 * the renewed expiry differ from the first one. */
static bool test_autorenew_renews_at_once(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "renew-at-once"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=30s");
    OPEN(other, s, dir, NULL);
    struct lost_log log;
    int fds[2];
    if (!lost_log_init(&log, fds)) return false;
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    lock_info before, after;
    CHECK_RC(lock_inspect(other, &before), LOCK_OK);
    sleep_ms(20);
    CHECK_RC(lock_autorenew(h, on_lost, &log), LOCK_OK);
    int64_t give_up = mono_ms() + 5000;
    do {
        CHECK_RC(lock_inspect(other, &after), LOCK_OK);
        if (after.expires_unix_ms > before.expires_unix_ms) break;
        sleep_ms(5);
    } while (mono_ms() < give_up);
    CHECK_MSG(after.expires_unix_ms > before.expires_unix_ms,
              "5 s after lock_autorenew the expiry had not moved (%" PRId64 " ms): no renewal at once",
              after.expires_unix_ms);
    CHECK_MSG(__atomic_load_n(&log.calls, __ATOMIC_SEQ_CST) == 0, "the lost callback fired");
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    close(fds[0]);
    close(fds[1]);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* No thread can be made: lock_autorenew answers LOCK_ERR_SYSTEM with errno
 * set, and a watchdog already running goes on renewing. A child makes that
 * so by an address-space limit (RLIMIT_AS) 1 MiB above what it uses, which
 * leaves room for small allocations but not for a thread's stack, and by
 * threads of its own that take every stack glibc keeps for reuse. */
#define THREAD_STACK_BYTES (2u << 20) /* Rust's default: the size glibc reuses */
#define MAX_STACK_TAKERS 64            /* glibc keeps 40 MiB of stacks at most */

static void *wait_for_eof(void *fd) {
    char byte;
    while (read(*(int *)fd, &byte, 1) < 0 && errno == EINTR) {
    }
    return NULL;
}

static long address_space_bytes(void) {
    char statm[256];
    if (read_file("/proc/self/statm", statm, sizeof statm) <= 0) return -1;
    return strtol(statm, NULL, 10) * sysconf(_SC_PAGESIZE);
}

/* lock_autorenew(h) while no thread can be made: its result and errno. */
static bool autorenew_starved(lock_handle *h, lock_result *result, int *result_errno) {
    int eof[2];
    CHECK(pipe(eof) == 0);
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, THREAD_STACK_BYTES) == 0);
    struct rlimit unlimited, tight;
    CHECK(getrlimit(RLIMIT_AS, &unlimited) == 0);
    long used = address_space_bytes();
    CHECK(used > 0);
    tight.rlim_cur = (rlim_t)used + (1u << 20);
    tight.rlim_max = unlimited.rlim_max;
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    pthread_t takers[MAX_STACK_TAKERS];
    int taken = 0, refused = 0;
    while (taken < MAX_STACK_TAKERS && (refused = pthread_create(&takers[taken], &attr, wait_for_eof, &eof[0])) == 0) {
        taken++;
    }
    errno = 0;
    *result = refused != 0 ? lock_autorenew(h, NULL, NULL) : LOCK_OK;
    *result_errno = errno;
    setrlimit(RLIMIT_AS, &unlimited);
    close(eof[1]);
    for (int i = 0; i < taken; i++) pthread_join(takers[i], NULL);
    close(eof[0]);
    pthread_attr_destroy(&attr);
    CHECK_MSG(refused != 0, "%d threads were made with RLIMIT_AS at %ld + 1 MiB bytes", taken, used);
    return true;
}

static bool autorenew_without_threads(const char *dir) {
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    lock_result started;
    int started_errno;
    if (!autorenew_starved(h, &started, &started_errno)) return false;
    CHECK_RC(started, LOCK_ERR_SYSTEM);
    CHECK_MSG(started_errno != 0, "errno is 0 after LOCK_ERR_SYSTEM");

    /* with a watchdog running: the failed start leaves it running */
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK);
    if (!autorenew_starved(h, &started, &started_errno)) return false;
    CHECK_RC(started, LOCK_ERR_SYSTEM);
    CHECK_MSG(started_errno != 0, "errno is 0 after LOCK_ERR_SYSTEM");
    sleep_ms(900); /* three TTLs: unrenewed, the lock would have run out */
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale && info.fence == fence,
              "three TTLs after the failed lock_autorenew: held %d, stale %d, fence %" PRIu64 " (acquired %" PRIu64 ")",
              (int)info.held, (int)info.stale, info.fence, fence);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_autorenew_without_threads(void) {
    if (getenv("LOCKFFI_UNDER_MEMCHECK") != NULL) {
        SKIP("under memcheck, which keeps its own address space, RLIMIT_AS does not stop thread stacks alone");
    }
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "no-threads"));
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60); /* the case's limit, for the child */
        child_exit(autorenew_without_threads(dir));
    }
    CHECK_CHILD_OK(pid);
    return true;
}

/* lock_prolong answering LOCK_LOST stops the watchdog, as a lost release or
 * commit does. Left running, it renews an acquisition that is gone: once
 * the handle acquires again, its next tick finds the old one lost, calls
 * the callback about the new acquisition, and stops. mkdir stands for the
 * strategies: the watchdog is the library's. */
static bool test_lost_prolong_stops_watchdog(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "lost-prolong"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    struct lost_log log;
    int fds[2];
    if (!lost_log_init(&log, fds)) return false;
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, on_lost, &log), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(other, &was_held), LOCK_OK);
    CHECK_RC(lock_prolong(h, 0), LOCK_LOST);
    /* 1 if the watchdog saw the break first; no call may follow */
    int calls = __atomic_load_n(&log.calls, __ATOMIC_SEQ_CST);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    sleep_ms(250); /* most of a TTL: a watchdog still running ticks twice */
    int later = __atomic_load_n(&log.calls, __ATOMIC_SEQ_CST);
    CHECK_MSG(later == calls,
              "the lost callback ran %d time(s) after lock_prolong answered LOCK_LOST and the handle acquired again",
              later - calls);
    lock_result released;
    CHECK_RC_EITHER(released, lock_release(h, 0), LOCK_OK, LOCK_EXPIRED);
    close(fds[0]);
    close(fds[1]);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Cooldown, for every strategy                                             */
/* ------------------------------------------------------------------------ */

static bool cooldown(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, NULL);
    OPEN(b, s, dir, NULL);
    uint64_t fa = 0, fb = 0;
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    int64_t before = unix_ms();
    int64_t released_at = mono_ms();
    CHECK_RC(lock_release(a, 300), LOCK_OK);
    int64_t after = unix_ms();
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.cooldown_until_unix_ms >= before + 299 && info.cooldown_until_unix_ms <= after + 301,
              "after release with 300 ms: held %d, cooldown_until %" PRId64 " for a release in [%" PRId64
              ", %" PRId64 "]",
              (int)info.held, info.cooldown_until_unix_ms, before, after);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(b, &probe), LOCK_BUSY);
    CHECK_RC(lock_try_acquire(a, &probe), LOCK_BUSY);
    CHECK_RC(lock_acquire(b, 0, &probe), LOCK_TIMEOUT);
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written during the cooldown");
    CHECK_RC(lock_acquire(b, 5000, &fb), LOCK_OK);
    int64_t waited = mono_ms() - released_at;
    CHECK_MSG(waited >= 280, "acquired %" PRId64 " ms into a 300 ms cooldown", waited);
    CHECK_MSG(fb > fa, "fence %" PRIu64 " after %" PRIu64, fb, fa);
    CHECK_RC(lock_inspect(a, &info), LOCK_OK);
    CHECK_MSG(info.held && info.cooldown_until_unix_ms == 0, "after the cooldown: held %d, cooldown_until %" PRId64,
              (int)info.held, info.cooldown_until_unix_ms);
    /* a release without cooldown leaves it open at once */
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    CHECK_RC(lock_release(a, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);

    /* a release past the TTL (LOCK_EXPIRED) did release, and keeps the cooldown */
    OPEN(a, s, dir, "ttl=100ms");
    OPEN(b, s, dir, NULL);
    CHECK_RC(lock_try_acquire(a, NULL), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_release(a, 300), LOCK_EXPIRED);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.cooldown_until_unix_ms > unix_ms(),
              "after an expired release with 300 ms: held %d, cooldown_until %" PRId64, (int)info.held,
              info.cooldown_until_unix_ms);
    CHECK_RC(lock_try_acquire(b, NULL), LOCK_BUSY);
    CHECK_RC(lock_acquire(b, 5000, NULL), LOCK_OK);
    CHECK_RC(lock_release(b, 0), LOCK_OK);

    /* a release that finds the lock lost changes nothing: no cooldown for
     * the new holder's lock (flock cannot be lost: its TTL is advisory) */
    if (!s->ttl_is_advisory) {
        CHECK_RC(lock_try_acquire(a, NULL), LOCK_OK);
        sleep_ms(250);
        CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK);
        CHECK_RC(lock_release(a, 5000), LOCK_LOST);
        CHECK_RC(lock_inspect(b, &info), LOCK_OK);
        CHECK_MSG(info.held_by_this_handle && info.fence == fb && info.cooldown_until_unix_ms == 0,
                  "a lost release with a cooldown: by this %d, fence %" PRIu64 ", cooldown_until %" PRId64,
                  (int)info.held_by_this_handle, info.fence, info.cooldown_until_unix_ms);
        CHECK_RC(lock_release(b, 0), LOCK_OK);
        CHECK_RC(lock_try_acquire(a, NULL), LOCK_OK);
        CHECK_RC(lock_release(a, 0), LOCK_OK);
    }
    CLOSE(a);
    CLOSE(b);
    return true;
}

static bool test_cooldown(void) {
    return for_each_strategy(cooldown);
}

/* ------------------------------------------------------------------------ */
/* Failed attempts leave nothing behind                                     */
/* ------------------------------------------------------------------------ */

/* While one handle holds, another tries 300 times (lock_try_acquire, and
 * lock_acquire with a zero budget): every try is LOCK_BUSY or LOCK_TIMEOUT,
 * and afterwards the holder releases with LOCK_OK and the lock is free. A
 * CGI program that gives up at once on a busy lock does exactly this. */
#define FAILED_TRIES 300

static bool failed_attempts(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *h = NULL;
    OPEN(holder, s, dir, NULL);
    OPEN(h, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(holder, &fence), LOCK_OK);
    for (int i = 0; i < FAILED_TRIES; i++) {
        lock_result rc = i % 2 == 0 ? lock_try_acquire(h, NULL) : lock_acquire(h, 0, NULL);
        lock_result expected = i % 2 == 0 ? LOCK_BUSY : LOCK_TIMEOUT;
        if (rc != expected) {
            char message[512];
            harness_fail_rc(__FILE__, __LINE__, i % 2 == 0 ? "lock_try_acquire" : "lock_acquire(h, 0)", (int)rc,
                            (int)expected, last_error(message, sizeof message));
            harness_fail(__FILE__, __LINE__, "(attempt %d of %d)", i, FAILED_TRIES);
            return false;
        }
    }
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    uint64_t next = 0;
    CHECK_RC(lock_try_acquire(h, &next), LOCK_OK);
    CHECK_MSG(next > fence, "fence %" PRIu64 " after %" PRIu64, next, fence);
    lock_info info;
    CHECK_RC(lock_inspect(holder, &info), LOCK_OK);
    /* the holder, and no waiter left behind by the failed attempts */
    CHECK_MSG(info.held && info.fence == next && info.queue_length == 1u,
              "after the failed attempts: held %d, fence %" PRIu64 ", queue_length %" PRIu32, (int)info.held,
              info.fence, info.queue_length);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(h);
    return true;
}

static bool test_failed_attempts_leave_lock_usable(void) {
    return for_each_strategy(failed_attempts);
}

/* ------------------------------------------------------------------------ */
/* symlink: the link's mtime is the expiry; coreutils touch -h moves it      */
/* ------------------------------------------------------------------------ */

/* Runs the real `touch -h -d @<seconds> <path>`; false if it cannot run. */
static bool run_touch(const char *path, int64_t seconds, int *status_out) {
    char when[32];
    snprintf(when, sizeof when, "@%" PRId64, seconds);
    pid_t pid = fork_child();
    if (pid < 0) return false;
    if (pid == 0) {
        execlp("touch", "touch", "-h", "-d", when, path, (char *)NULL);
        _exit(127);
    }
    *status_out = wait_child(pid);
    return true;
}

#define TOUCH_MISSING 127

static bool test_symlink_touch_extends(void) {
    SCHEME(s, "symlink");
    char dir[HARNESS_PATH_MAX], lock[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "touch"));
    path_join(lock, sizeof lock, dir, s->lock_name);
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=1s");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);

    /* the lock is a symlink naming its owner; its own mtime is the expiry */
    struct stat st;
    CHECK_MSG(lstat(lock, &st) == 0 && S_ISLNK(st.st_mode), "%s is not a symbolic link while held", lock);
    /* `lockcore 2 <host> <boot> <pid> <start> ...`: ls -l shows who holds it */
    char target[512], host[256] = "";
    ssize_t n = readlink(lock, target, sizeof target - 1);
    CHECK(n > 0);
    target[n] = '\0';
    CHECK(gethostname(host, sizeof host - 1) == 0);
    char host_read[256];
    long pid_read = 0;
    bool parsed = sscanf(target, "lockcore 2 %255s %*s %*s %ld ", host_read, &pid_read) == 2;
    CHECK_MSG(parsed && strcmp(host_read, host) == 0 && pid_read == (long)getpid(),
              "the link's target \"%s\" does not name this process (%ld on %s)", target, (long)getpid(), host);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    int64_t mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    int64_t original = info.expires_unix_ms;
    CHECK_MSG(original != 0 && llabs(mtime_ms - original) <= 2000,
              "the link's mtime %" PRId64 " is not the expiry %" PRId64 " inspect reports", mtime_ms, original);

    /* an operator extends it by an hour from a shell */
    int64_t later = unix_ms() / 1000 + 3600;
    int status = 0;
    CHECK_MSG(run_touch(lock, later, &status), "cannot fork for touch");
    if (WIFEXITED(status) && WEXITSTATUS(status) == TOUCH_MISSING) {
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        CLOSE(h);
        CLOSE(other);
        SKIP("coreutils touch is not on PATH");
    }
    char text[64];
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "touch -h -d @%" PRId64 " %s %s", later, lock,
              describe_status(status, text, sizeof text));
    CHECK_MSG(lstat(lock, &st) == 0 && S_ISLNK(st.st_mode) && st.st_mtim.tv_sec == later,
              "after touch -h the link's mtime is %ld, expected %" PRId64, (long)st.st_mtim.tv_sec, later);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(llabs(info.expires_unix_ms - later * 1000) <= 1000,
              "after touch -h to %" PRId64 "000, inspect reports expiry %" PRId64 " (was %" PRId64 ")", later,
              info.expires_unix_ms, original);
    CHECK_MSG(info.held && !info.stale && info.fence == fence, "after touch -h: held %d, stale %d", (int)info.held,
              (int)info.stale);
    const char *expected_entries[] = {s->lock_name, s->guard_name, NULL};
    size_t entries = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        bool known =
            strcmp(entry->d_name, expected_entries[0]) == 0 || strcmp(entry->d_name, expected_entries[1]) == 0;
        if (!known) {
            closedir(d);
            CHECK_MSG(false, "touch -h made \"%s\" (it followed the link?)", entry->d_name);
        }
        entries++;
    }
    closedir(d);
    CHECK(entries == 2);

    /* past the original 1 s TTL the lock is not broken */
    sleep_ms(1300);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale && info.fence == fence, "past the original TTL: held %d, stale %d",
              (int)info.held, (int)info.stale);
    /* release reads the expiry from the link: within it, so LOCK_OK */
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    /* and touch -h into the past ends a lock of an hour at once */
    CLOSE(h);
    OPEN(h, s, dir, "ttl=1h");
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    int64_t earlier = unix_ms() / 1000 - 10;
    CHECK_MSG(run_touch(lock, earlier, &status), "cannot fork for touch");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "touch -h -d @%" PRId64 " %s %s", earlier, lock,
              describe_status(status, text, sizeof text));
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && info.stale && llabs(info.expires_unix_ms - earlier * 1000) <= 1000,
              "after touch -h into the past: held %d, stale %d, expires %" PRId64, (int)info.held, (int)info.stale,
              info.expires_unix_ms);
    uint64_t taken = 0;
    CHECK_RC(lock_try_acquire(other, &taken), LOCK_OK);
    CHECK_MSG(taken > fence, "fence %" PRIu64 " after %" PRIu64, taken, fence);
    CHECK_RC(lock_release(h, 0), LOCK_LOST);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* ------------------------------------------------------------------------ */
/* lease: the lease file, cooldown, signal=                                 */
/* ------------------------------------------------------------------------ */

/* The pid of the lease file's holder (`lease 2 held lockcore 2 <host>
 * <boot> <pid> ...`), 0 when it is free (`lease 2 free ...`); -1 if the
 * file is neither. */
static long lease_pid(const char *path) {
    char text[512];
    if (read_file(path, text, sizeof text) <= 0) return -1;
    if (strncmp(text, "lease 2 free ", 13) == 0) return 0;
    long pid = -1;
    if (sscanf(text, "lease 2 held lockcore 2 %*s %*s %*s %ld ", &pid) != 1) return -1;
    return pid;
}

static bool test_lease_file_and_cooldown(void) {
    SCHEME(s, "lease");
    char dir[HARNESS_PATH_MAX], lease[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "lease"));
    path_join(lease, sizeof lease, dir, s->lock_name);
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=10s");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    long pid = lease_pid(lease);
    CHECK_MSG(pid == (long)getpid(), "the lease file's first field is %ld while held by %ld", pid, (long)getpid());

    int64_t before = unix_ms();
    int64_t released_at = mono_ms();
    CHECK_RC(lock_release(h, 500), LOCK_OK);
    int64_t after = unix_ms();
    pid = lease_pid(lease);
    CHECK_MSG(pid == 0, "the lease file's first field is %ld after release", pid);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == fence && info.cooldown_until_unix_ms >= before + 499 &&
                  info.cooldown_until_unix_ms <= after + 501,
              "after release with 500 ms: held %d, last_fence %" PRIu64 ", cooldown_until %" PRId64, (int)info.held,
              info.last_fence, info.cooldown_until_unix_ms);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_BUSY);
    CHECK_MSG(lease_pid(lease) == 0, "a refused attempt wrote the lease");
    uint64_t next = 0;
    CHECK_RC(lock_acquire(other, 5000, &next), LOCK_OK);
    int64_t waited = mono_ms() - released_at;
    CHECK_MSG(waited >= 480, "acquired %" PRId64 " ms into a 500 ms cooldown", waited);
    CHECK_MSG(next > fence, "fence %" PRIu64 " after %" PRIu64, next, fence);
    CHECK_MSG(lease_pid(lease) == (long)getpid(), "the lease file does not name the new holder");
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CHECK_MSG(lease_pid(lease) == 0, "the lease file names a holder after release");
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* The expired holder, a child: it holds with ttl=200ms and then waits on a
 * pipe. SIGTERM makes it write 'T' and exit 0; the parent's 'q' makes it
 * write 'N' (no signal came) and exit 0. */
static int term_fd = -1;
/* The child's handle: static, so that it is still reachable (not a leak for
 * valgrind) when the SIGTERM handler ends the child. */
static lock_handle *lease_child_handle;

static void on_term(int signal) {
    (void)signal;
    char byte = 'T';
    ssize_t ignored = write(term_fd, &byte, 1);
    (void)ignored;
    _exit(0);
}

static bool lease_holder_child(const struct strategy *s, const char *dir, int report_fd, int command_fd) {
    term_fd = report_fd;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_term;
    sigemptyset(&action.sa_mask);
    CHECK(sigaction(SIGTERM, &action, NULL) == 0);
    OPEN(lease_child_handle, s, dir, "ttl=200ms");
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(lease_child_handle, &fence), LOCK_OK);
    CHECK(write_exact(report_fd, &fence, sizeof fence));
    char command;
    CHECK(read_exact(command_fd, &command, 1));
    char byte = 'N';
    CHECK(write_exact(report_fd, &byte, 1));
    /* the parent holds the lease now: lock_close's release finds it lost,
     * and says so */
    CHECK_RC(lock_close(lease_child_handle), LOCK_LOST);
    return true;
}

/* One round: the child holds, its lease runs out, the parent takes it over
 * with `options`. Gives the child's answer ('T', 'N'; 0 if it gave none, as
 * a killed child cannot) and its wait status. */
static bool lease_takeover(const struct strategy *s, const char *dir, const char *options, char *answer,
                           int *status_out) {
    char lease[HARNESS_PATH_MAX];
    path_join(lease, sizeof lease, dir, s->lock_name);
    int report[2], command[2];
    CHECK(pipe(report) == 0 && pipe(command) == 0);
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(report[0]);
        close(command[1]);
        child_exit(lease_holder_child(s, dir, report[1], command[0]));
    }
    close(report[1]);
    close(command[0]);
    uint64_t child_fence = 0;
    bool reported = read_exact(report[0], &child_fence, sizeof child_fence);
    long holder = lease_pid(lease);
    lock_result taken = LOCK_ERR_PANIC;
    uint64_t fence = 0;
    lock_handle *h = NULL;
    lock_result opened = open_lock(s, dir, options, &h);
    if (reported && opened == LOCK_OK) {
        sleep_ms(400); /* past the child's 200 ms TTL */
        taken = lock_try_acquire(h, &fence);
    }
    write_exact(command[1], "q", 1); /* a child that was not signalled answers 'N' */
    *answer = 0;
    bool answered = read_exact(report[0], answer, 1);
    close(command[1]);
    close(report[0]);
    *status_out = wait_child(pid);
    CHECK_MSG(reported, "the child did not acquire the lease");
    CHECK_RC(opened, LOCK_OK);
    CHECK_MSG(holder == (long)pid, "the lease file's first field is %ld while child %ld holds it", holder, (long)pid);
    CHECK_RC(taken, LOCK_OK);
    CHECK_MSG(fence > child_fence, "fence %" PRIu64 " after the child's %" PRIu64, fence, child_fence);
    if (!answered) *answer = 0;
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_lease_signal_option(void) {
    SCHEME(s, "lease");
    char dir[HARNESS_PATH_MAX], text[64];
    CHECK(make_temp_dir(dir, sizeof dir, "signal"));
    char answer;
    int status;
    /* signal=TERM: the expired holder is told to stop */
    if (!lease_takeover(s, dir, "signal=TERM", &answer, &status)) return false;
    CHECK_MSG(answer == 'T', "with signal=TERM the expired holder answered '%c', not 'T' (SIGTERM received)",
              answer);
    CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the SIGTERM'd child %s",
              describe_status(status, text, sizeof text));
    /* the control: without signal= nobody is signalled */
    if (!lease_takeover(s, dir, NULL, &answer, &status)) return false;
    CHECK_MSG(answer == 'N', "without signal= the expired holder answered '%c', not 'N'", answer);
    CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the control child %s",
              describe_status(status, text, sizeof text));
    /* signal=KILL: the expired holder dies of it, without a word */
    if (!lease_takeover(s, dir, "signal=KILL", &answer, &status)) return false;
    CHECK_MSG(answer == 0 && status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "with signal=KILL the expired holder answered '%c' and %s", answer ? answer : '-',
              describe_status(status, text, sizeof text));
    return true;
}

/* ------------------------------------------------------------------------ */
/* toplock: first come, first served                                        */
/* ------------------------------------------------------------------------ */

#define QUEUERS 5

struct queue_log {
    int next;                 /* how many have had the lock */
    int order[QUEUERS];       /* order[k]: the child that had it k-th */
    uint64_t fences[QUEUERS]; /* fences[k]: its fence */
    int inside, overlaps;
};

static bool queuer(const struct strategy *s, const char *dir, int number, struct queue_log *log) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_acquire(h, 60000, &fence), LOCK_OK);
    if (__atomic_add_fetch(&log->inside, 1, __ATOMIC_SEQ_CST) != 1) {
        __atomic_add_fetch(&log->overlaps, 1, __ATOMIC_SEQ_CST);
    }
    int k = __atomic_fetch_add(&log->next, 1, __ATOMIC_SEQ_CST);
    if (k < QUEUERS) {
        log->order[k] = number;
        log->fences[k] = fence;
    }
    __atomic_sub_fetch(&log->inside, 1, __ATOMIC_SEQ_CST);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

/* Polls lock_inspect until queue_length is `want` (10 s at most); the
 * length seen last goes to *seen. No sleep: each poll is a read of the log. */
static bool wait_queue_length(lock_handle *observer, uint32_t want, uint32_t *seen) {
    int64_t deadline = mono_ms() + 10000;
    lock_info info;
    do {
        CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
        *seen = info.queue_length;
        if (info.queue_length == want) return true;
        sched_yield();
    } while (mono_ms() < deadline);
    harness_fail(__FILE__, __LINE__, "queue_length stayed %" PRIu32 ", never reached %" PRIu32, *seen, want);
    return false;
}

/* Watches the queue from inside a waiting lock_acquire (its warning
 * callback, which must not use the waiting handle, uses another). */
struct queue_watch {
    lock_handle *observer;
    uint32_t max_length;
    int calls;
};

static void watch_queue(void *context, uint64_t waited_ms) {
    struct queue_watch *watch = context;
    (void)waited_ms;
    lock_info info;
    if (lock_inspect(watch->observer, &info) == LOCK_OK && info.queue_length > watch->max_length) {
        watch->max_length = info.queue_length;
    }
    watch->calls++;
}

static bool test_toplock_fifo(void) {
    SCHEME(s, "toplock");
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "fifo"));
    struct queue_log *log = mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK_MSG(log != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(log, 0, sizeof *log);
    lock_handle *holder = NULL, *observer = NULL, *quitter = NULL;
    OPEN(holder, s, dir, NULL);
    OPEN(observer, s, dir, NULL);
    OPEN(quitter, s, dir, "wmin=10ms");
    uint64_t holder_fence = 0;
    CHECK_RC(lock_try_acquire(holder, &holder_fence), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
    CHECK_MSG(info.queue_length == 1, "queue_length %" PRIu32 " with only the holder", info.queue_length);

    /* five children queue one after another: each one's request is in the
     * log before the next child starts */
    pid_t pids[QUEUERS];
    int started = 0;
    bool queued = true;
    uint32_t seen = 0;
    for (int i = 0; i < QUEUERS && queued; i++) {
        pid_t pid = fork_child();
        if (pid < 0) break;
        if (pid == 0) {
            alarm(90);
            child_exit(queuer(s, dir, i, log));
        }
        pids[started++] = pid;
        queued = wait_queue_length(observer, (uint32_t)(2 + i), &seen);
    }

    /* a waiter that gives up leaves the queue; one try keeps no place */
    lock_result tried = LOCK_ERR_PANIC, quit = LOCK_ERR_PANIC;
    uint32_t after_quit = 0, after_try = 0;
    struct queue_watch watch = {observer, 0, 0};
    if (queued && started == QUEUERS) {
        tried = lock_try_acquire(quitter, NULL);
        if (lock_inspect(observer, &info) == LOCK_OK) after_try = info.queue_length;
        lock_set_warning(quitter, watch_queue, &watch);
        quit = lock_acquire(quitter, 100, NULL);
        if (lock_inspect(observer, &info) == LOCK_OK) after_quit = info.queue_length;
        lock_set_warning(quitter, NULL, NULL);
    }
    CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
    lock_info while_queued = info;
    /* the holder lets go; the children must follow in their order */
    lock_result released = lock_release(holder, 0);
    int failed_children = 0;
    for (int i = 0; i < started; i++) {
        int status = wait_child(pids[i]);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
    }
    CHECK_MSG(started == QUEUERS, "only %d of %d children could be forked", started, QUEUERS);
    CHECK_MSG(queued, "child %d's request did not show in queue_length (%" PRIu32 ")", started - 1, seen);
    /* A waiter that gives up takes its request out of the queue by its
     * deadline, unless the queue file stays busy past that (on a slow
     * machine, under valgrind): then its request stays, and is passed over
     * once it has stood at the head as long as its waiter said it would
     * wait (100 ms), checked at the end. */
    uint32_t left = after_quit == 2 + QUEUERS ? 1 : 0;
    CHECK_MSG(while_queued.held && while_queued.owner_pid == (int32_t)getpid() &&
                  while_queued.fence == holder_fence && while_queued.queue_length == 1 + QUEUERS + left,
              "with %d waiting: held %d by %d, fence %" PRIu64 ", queue_length %" PRIu32, QUEUERS,
              (int)while_queued.held, (int)while_queued.owner_pid, while_queued.fence, while_queued.queue_length);
    CHECK_RC(tried, LOCK_BUSY);
    CHECK_MSG(after_try == 1 + QUEUERS, "after a busy try the queue is %" PRIu32 " long", after_try);
    CHECK_RC(quit, LOCK_TIMEOUT);
    CHECK_MSG(watch.calls > 0 && watch.max_length == 2 + QUEUERS,
              "while the 100 ms waiter waited the queue was %" PRIu32 " long (%d looks)", watch.max_length,
              watch.calls);
    CHECK_MSG(after_quit == 1 + QUEUERS + left, "after the waiter gave up the queue is %" PRIu32 " long", after_quit);
    CHECK_RC(released, LOCK_OK);
    CHECK_MSG(failed_children == 0, "%d children failed (printed above)", failed_children);
    CHECK_MSG(log->next == QUEUERS && log->overlaps == 0, "%d acquisitions, %d overlaps", log->next, log->overlaps);
    char order[64] = "";
    for (int k = 0; k < QUEUERS; k++) {
        size_t used = strlen(order);
        snprintf(order + used, sizeof order - used, "%s%d", k ? " " : "", log->order[k]);
    }
    for (int k = 0; k < QUEUERS; k++) {
        CHECK_MSG(log->order[k] == k, "the children had the lock in the order %s, not in their order of request",
                  order);
        uint64_t previous = k == 0 ? holder_fence : log->fences[k - 1];
        CHECK_MSG(log->fences[k] > previous, "fence %" PRIu64 " after %" PRIu64, log->fences[k], previous);
    }
    CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.queue_length == left, "at the end: held %d, queue_length %" PRIu32, (int)info.held,
              info.queue_length);
    /* a request left behind holds nobody up for longer than its waiter's wait */
    CHECK_RC(lock_acquire(observer, 5000, NULL), LOCK_OK);
    CHECK_RC(lock_release(observer, 0), LOCK_OK);
    CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.queue_length == 0, "at the very end: held %d, queue_length %" PRIu32,
              (int)info.held, info.queue_length);
    munmap(log, sizeof *log);
    CLOSE(holder);
    CLOSE(observer);
    CLOSE(quitter);
    return true;
}

static const struct test_case CASES[] = {
    {"test_commit_while_held", test_commit_while_held},
    {"test_commit_after_lost", test_commit_after_lost},
    {"test_commit_after_expiry", test_commit_after_expiry},
    {"test_autorenew_refusals", test_autorenew_refusals},
    {"test_autorenew_keeps_lock", test_autorenew_keeps_lock},
    {"test_autorenew_reports_loss", test_autorenew_reports_loss},
    {"test_lost_prolong_stops_watchdog", test_lost_prolong_stops_watchdog},
    {"test_autorenew_renews_at_once", test_autorenew_renews_at_once},
    {"test_autorenew_without_threads", test_autorenew_without_threads},
    {"test_cooldown", test_cooldown},
    {"test_failed_attempts_leave_lock_usable", test_failed_attempts_leave_lock_usable},
    {"test_symlink_touch_extends", test_symlink_touch_extends},
    {"test_lease_file_and_cooldown", test_lease_file_and_cooldown},
    {"test_lease_signal_option", test_lease_signal_option},
    {"test_toplock_fifo", test_toplock_fifo},
};

int main(int argc, char **argv) {
    /* a child that was signalled may be gone when the parent writes to it */
    signal(SIGPIPE, SIG_IGN);
    return run_tests("strategies", CASES, sizeof CASES / sizeof CASES[0], argc > 1 ? argv[1] : NULL);
}
