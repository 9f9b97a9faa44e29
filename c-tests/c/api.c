/*
 * api.c: the whole C API, for each scheme of lockcore's list (harness.h).
 * The calls the newer strategies brought (lock_commit, lock_autorenew) and
 * what only one strategy does are in strategies.c; the watchdog's part in
 * exit, fork and lock_close is here.
 *
 * Usage: c_api [name-filter]   (runs the cases whose name contains the filter)
 *
 * Each case prints `PASSED test_xxx` or `FAILED test_xxx: <why>`; the exit
 * status is 1 if any failed. Other processes are always synchronised with
 * pipes and waitpid(); sleeps only let a TTL or a cooldown run out, but for
 * one that gives a deadlock its chance (release_other_on_lost).
 */
#include <pthread.h>
#include <signal.h>

#include "harness.h"

/* Pre-filled into outputs that a failing call must leave alone. */
#define FENCE_SENTINEL UINT64_C(0x5EA15EA15EA15EA1)

/* Fails unless `dir` holds nothing but the names given (NULL-terminated):
 * no temporary, staging or retired files left behind. */
static bool only_entries(const char *dir, const char *allowed[]) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "opendir(%s): %s", dir, strerror(errno));
    struct dirent *entry;
    char stray[256] = "";
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        bool known = false;
        for (size_t i = 0; allowed[i] != NULL; i++) {
            if (strcmp(entry->d_name, allowed[i]) == 0) known = true;
        }
        if (!known && stray[0] == '\0') snprintf(stray, sizeof stray, "%s", entry->d_name);
    }
    closedir(d);
    CHECK_MSG(stray[0] == '\0', "unexpected entry \"%s\" left in %s", stray, dir);
    return true;
}

/* After every lock is released: only the guard, a lock path that stays
 * (flock's target, the lease, the queue) and the turnstile its waiters
 * queued in (`<lock>.turnstile`, made once someone had to wait) may remain. */
static bool no_litter(const struct strategy *s, const char *dir) {
    const char *allowed[4] = {NULL, NULL, NULL, NULL};
    size_t n = 0;
    char turnstile[256];
    snprintf(turnstile, sizeof turnstile, "%s.turnstile", s->lock_name);
    allowed[n++] = turnstile;
    if (s->guard_name != NULL) allowed[n++] = s->guard_name;
    if (s->lock_file_stays) allowed[n++] = s->lock_name;
    return only_entries(dir, allowed);
}

static bool test_version(void) {
    const char *version = lock_version();
    CHECK(version != NULL);
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", LOCKFFI_VERSION_MAJOR, LOCKFFI_VERSION_MINOR,
             LOCKFFI_VERSION_PATCH);
    CHECK_MSG(strcmp(version, expected) == 0, "lock_version() is \"%s\" but the header's LOCKFFI_VERSION_* say \"%s\"",
              version, expected);
    CHECK_MSG(lock_version() == version, "lock_version() is not one static string");
    return true;
}

/* open, try_acquire, release, close; and close releases a held lock. */
static bool basic_cycle(const struct strategy *s, const char *dir) {
    char lock[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, s->lock_name);
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    CHECK(h != NULL);
    const char *nothing[] = {NULL};
    CHECK_MSG(only_entries(dir, nothing), "lock_open touched the file system");

    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_MSG(fence > 0, "the first fence is %" PRIu64, fence);
    CHECK_MSG(path_exists(lock), "%s does not exist while the lock is held", lock);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    if (s->lock_file_stays) {
        CHECK_MSG(path_exists(lock), "%s, which stays, is gone after release", lock);
    } else {
        CHECK_MSG(!path_exists(lock), "%s still exists after release", lock);
    }

    /* lock_acquire, with the optional fence output left NULL */
    CHECK_RC(lock_acquire(h, 1000, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    /* lock_close releases a lock still held, and says so: LOCK_OK */
    uint64_t last = 0;
    CHECK_RC(lock_try_acquire(h, &last), LOCK_OK);
    CHECK_RC(lock_close(h), LOCK_OK);
    lock_handle *other = NULL;
    OPEN(other, s, dir, NULL);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == last, "after lock_close of a held lock: held %d, last_fence %" PRIu64,
              (int)info.held, info.last_fence);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(other);
    return no_litter(s, dir);
}

static bool test_open_acquire_release_close(void) {
    return for_each_strategy(basic_cycle);
}

/* Fences strictly increase over acquisitions by two handles, then a third. */
static bool fences_increase(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL, *c = NULL;
    OPEN(a, s, dir, NULL);
    OPEN(b, s, dir, NULL);
    /* a, a, b, a, b, b: the same handle twice in a row and alternating */
    lock_handle *order[] = {a, a, b, a, b, b};
    uint64_t last = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        lock_handle *h = order[i];
        lock_handle *observer = h == a ? b : a;
        uint64_t fence = 0;
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
        CHECK_MSG(fence > last, "acquisition %zu got fence %" PRIu64 " after %" PRIu64, i, fence, last);
        lock_info info;
        CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
        CHECK_MSG(info.fence == fence && info.last_fence == fence,
                  "inspect shows fence %" PRIu64 ", last_fence %" PRIu64 "; the holder got %" PRIu64, info.fence,
                  info.last_fence, fence);
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        last = fence;
    }
    /* a handle opened later continues the sequence */
    OPEN(c, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_acquire(c, 1000, &fence), LOCK_OK);
    CHECK_MSG(fence > last, "a new handle got fence %" PRIu64 " after %" PRIu64, fence, last);
    CHECK_RC(lock_release(c, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    CLOSE(c);
    return no_litter(s, dir);
}

static bool test_fences_strictly_increase(void) {
    return for_each_strategy(fences_increase);
}

/* lock_acquire: at once on a free lock, LOCK_TIMEOUT after the budget on a
 * lock held by another handle of this process. */
static bool acquire_timeout(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, NULL);
    OPEN(b, s, dir, NULL);
    uint64_t fa = 0;
    CHECK_RC(lock_acquire(a, 1000, &fa), LOCK_OK);

    uint64_t fb = FENCE_SENTINEL;
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(b, 200, &fb), LOCK_TIMEOUT);
    int64_t waited = mono_ms() - start;
    CHECK_MSG(waited >= 190, "LOCK_TIMEOUT after %" PRId64 " ms of a 200 ms budget", waited);
    CHECK_MSG(waited < 10000, "a 200 ms budget took %" PRId64 " ms", waited);
    CHECK_MSG(fb == FENCE_SENTINEL, "fence_out was written on LOCK_TIMEOUT");
    /* a zero budget is one attempt that answers LOCK_TIMEOUT */
    CHECK_RC(lock_acquire(b, 0, &fb), LOCK_TIMEOUT);
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_BUSY);
    CHECK_MSG(fb == FENCE_SENTINEL, "fence_out was written on LOCK_BUSY");

    CHECK_RC(lock_release(a, 0), LOCK_OK);
    CHECK_RC(lock_acquire(b, 0, &fb), LOCK_OK);
    CHECK_MSG(fb > fa && fb != FENCE_SENTINEL, "fence %" PRIu64 " after %" PRIu64, fb, fa);
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    return true;
}

static bool test_acquire_with_timeout(void) {
    return for_each_strategy(acquire_timeout);
}

/* Fails unless `expires` is `ttl_ms` after a moment in [before, after]. */
static bool expires_between(int64_t expires, int64_t before, int64_t after, int64_t ttl_ms) {
    CHECK_MSG(expires >= before + ttl_ms - 1 && expires <= after + ttl_ms + 1,
              "expires_unix_ms %" PRId64 " is not %" PRId64 " ms after [%" PRId64 ", %" PRId64 "]", expires, ttl_ms,
              before, after);
    return true;
}

/* lock_prolong: LOCK_OK within the TTL (spec's or given), LOCK_EXPIRED past it. */
static bool prolong_outcomes(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=30s");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    lock_info info;

    int64_t before = unix_ms();
    CHECK_RC(lock_prolong(h, 0), LOCK_OK); /* 0: the spec's ttl */
    int64_t after = unix_ms();
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    if (!expires_between(info.expires_unix_ms, before, after, 30000)) return false;
    CHECK_MSG(info.fence == fence, "prolong changed the fence from %" PRIu64 " to %" PRIu64, fence, info.fence);

    before = unix_ms();
    CHECK_RC(lock_prolong(h, 5000), LOCK_OK);
    after = unix_ms();
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    if (!expires_between(info.expires_unix_ms, before, after, 5000)) return false;

    /* run past a 100 ms TTL: LOCK_EXPIRED, and held again */
    CHECK_RC(lock_prolong(h, 100), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held, "the expired lock is reported free before anyone took it");
    CHECK_MSG(info.stale == !s->ttl_is_advisory, "stale is %d for a lock 150 ms past its TTL", (int)info.stale);
    before = unix_ms();
    CHECK_RC(lock_prolong(h, 60000), LOCK_EXPIRED);
    after = unix_ms();
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && !info.stale, "after LOCK_EXPIRED from prolong the handle does not hold a fresh lock");
    if (!expires_between(info.expires_unix_ms, before, after, 60000)) return false;
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);

    /* the spec's own TTL of 100 ms (LockFile::Simple's `hold`) */
    OPEN(h, s, dir, "hold=100ms");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_prolong(h, 60000), LOCK_EXPIRED);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);

    /* without any TTL, prolong(0) makes the lock never expire */
    OPEN(h, s, dir, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_prolong(h, 10000), LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.expires_unix_ms != 0, "prolong(10000) left no expiry");
    CHECK_RC(lock_prolong(h, 0), LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.expires_unix_ms == 0, "prolong(0) without a spec ttl left expiry %" PRId64, info.expires_unix_ms);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return no_litter(s, dir);
}

static bool test_prolong(void) {
    return for_each_strategy(prolong_outcomes);
}

/* lock_release: LOCK_OK within the TTL, LOCK_EXPIRED past it (and released). */
static bool release_outcomes(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *brief = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=30s");
    OPEN(brief, s, dir, "ttl=100ms");
    OPEN(other, s, dir, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    CHECK_RC(lock_try_acquire(brief, NULL), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_release(brief, 0), LOCK_EXPIRED);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(other, &fence), LOCK_OK); /* LOCK_EXPIRED did release it */
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(brief);
    CLOSE(other);
    return no_litter(s, dir);
}

static bool test_release_ok_and_expired(void) {
    return for_each_strategy(release_outcomes);
}

/* LOCK_LOST: A overruns a 100 ms TTL, B breaks the expired lock; A's release
 * and prolong then report LOCK_LOST and change nothing. flock's TTL is
 * advisory: B cannot take a live holder's lock, and A's release is EXPIRED. */
static bool lost_lock(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, "ttl=100ms");
    OPEN(b, s, dir, NULL);
    uint64_t fa = 0, fb = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    sleep_ms(250);
    if (s->ttl_is_advisory) {
        CHECK_RC(lock_try_acquire(b, &fb), LOCK_BUSY);
        CHECK_RC(lock_release(a, 0), LOCK_EXPIRED);
        CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK);
        CHECK_RC(lock_release(b, 0), LOCK_OK);
        CLOSE(a);
        CLOSE(b);
        return true;
    }
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK); /* breaks A's expired lock */
    CHECK_MSG(fb > fa, "the breaker got fence %" PRIu64 " after %" PRIu64, fb, fa);
    CHECK_RC(lock_release(a, 0), LOCK_LOST);
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held && info.held_by_this_handle && info.fence == fb && info.owner_pid == (int32_t)getpid(),
              "after A's LOCK_LOST, B does not hold the lock (held %d, by B %d, fence %" PRIu64 ")", (int)info.held,
              (int)info.held_by_this_handle, info.fence);
    CHECK_RC(lock_inspect(a, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.held_by_this_handle, "A still believes it holds the lock");
    CHECK_RC(lock_release(a, 0), LOCK_ERR_NOT_HELD); /* the handle holds nothing after LOCK_LOST */

    /* the same through prolong */
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    sleep_ms(250);
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK);
    CHECK_RC(lock_prolong(a, 60000), LOCK_LOST);
    CHECK_RC(lock_prolong(a, 60000), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == fb, "A's lost prolong disturbed B's lock");
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    return no_litter(s, dir);
}

static bool test_lost(void) {
    return for_each_strategy(lost_lock);
}

/* lock_inspect's fields, from the holder and from another handle; cooldown. */
static bool inspect_fields(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=10s");
    OPEN(other, s, dir, NULL);
    lock_info info;
    memset(&info, 0xA5, sizeof info);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info_is_empty(&info), "a lock never taken is not reported free and empty");

    int64_t before = unix_ms();
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    int64_t after = unix_ms();
    char host[256] = "";
    CHECK(gethostname(host, sizeof host - 1) == 0);
    for (int view = 0; view < 2; view++) {
        lock_handle *viewer = view == 0 ? h : other;
        CHECK_RC(lock_inspect(viewer, &info), LOCK_OK);
        CHECK_MSG(info.held, "view %d: not held", view);
        CHECK_MSG(info.held_by_this_handle == (view == 0), "view %d: held_by_this_handle is %d", view,
                  (int)info.held_by_this_handle);
        CHECK_MSG(!info.stale, "view %d: a fresh lock is stale", view);
        CHECK_MSG(info.owner_liveness == LOCK_OWNER_ALIVE, "view %d: owner_liveness %d", view,
                  (int)info.owner_liveness);
        CHECK_MSG(info.owner_pid == (int32_t)getpid(), "view %d: owner_pid %d, getpid() %d", view,
                  (int)info.owner_pid, (int)getpid());
        CHECK_MSG(memchr(info.owner_host, '\0', sizeof info.owner_host) != NULL, "owner_host is not terminated");
        CHECK_MSG(info.owner_host[0] != '\0', "view %d: owner_host is empty", view);
        CHECK_MSG(strcmp(info.owner_host, host) == 0, "view %d: owner_host \"%s\", gethostname \"%s\"", view,
                  info.owner_host, host);
        CHECK_MSG(info.fence == fence && info.last_fence == fence,
                  "view %d: fence %" PRIu64 ", last_fence %" PRIu64 ", acquired %" PRIu64, view, info.fence,
                  info.last_fence, fence);
        if (!expires_between(info.expires_unix_ms, before, after, 10000)) return false;
        /* the milliseconds of the moment of taking (toplock: of the holder's
         * turn beginning), cut, not rounded */
        CHECK_MSG(info.since_unix_ms >= before - 1 && info.since_unix_ms <= after,
                  "view %d: since_unix_ms %" PRId64 " is not in [%" PRId64 ", %" PRId64 "]", view,
                  info.since_unix_ms, before, after);
        CHECK_MSG(info.cooldown_until_unix_ms == 0, "view %d: a cooldown while held", view);
        /* the queue (toplock's own, or the turnstile every scheme has)
         * counts the holder */
        uint32_t queue = 1;
        CHECK_MSG(info.queue_length == queue, "view %d: queue_length %" PRIu32 ", expected %" PRIu32, view,
                  info.queue_length, queue);
    }

    /* release with a cooldown: free but closed to everyone until it ends */
    before = unix_ms();
    int64_t released_at = mono_ms();
    CHECK_RC(lock_release(h, 300), LOCK_OK);
    after = unix_ms();
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.owner_pid == 0 && info.fence == 0 && info.last_fence == fence &&
                  info.queue_length == 0 && info.since_unix_ms == 0,
              "after release: held %d, owner_pid %d, fence %" PRIu64 ", last_fence %" PRIu64 ", queue_length %" PRIu32
              ", since_unix_ms %" PRId64,
              (int)info.held, (int)info.owner_pid, info.fence, info.last_fence, info.queue_length, info.since_unix_ms);
    CHECK_MSG(info.cooldown_until_unix_ms >= before + 299 && info.cooldown_until_unix_ms <= after + 301,
              "cooldown_until_unix_ms %" PRId64 " is not 300 ms after [%" PRId64 ", %" PRId64 "]",
              info.cooldown_until_unix_ms, before, after);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_RC(lock_try_acquire(h, &probe), LOCK_BUSY); /* the releaser too */
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written during the cooldown");
    uint64_t next = 0;
    CHECK_RC(lock_acquire(other, 10000, &next), LOCK_OK);
    int64_t waited = mono_ms() - released_at;
    CHECK_MSG(waited >= 280, "acquired %" PRId64 " ms into a 300 ms cooldown", waited);
    CHECK_MSG(next > fence, "fence %" PRIu64 " after %" PRIu64, next, fence);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.held_by_this_handle && info.cooldown_until_unix_ms == 0 && info.expires_unix_ms == 0,
              "after the cooldown: held %d, by this %d, cooldown_until %" PRId64 ", expires %" PRId64,
              (int)info.held, (int)info.held_by_this_handle, info.cooldown_until_unix_ms, info.expires_unix_ms);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return no_litter(s, dir);
}

static bool test_inspect_and_cooldown(void) {
    return for_each_strategy(inspect_fields);
}

/* lock_break: removes a held lock (was_held true, then false); flock cannot. */
static bool break_lock(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, NULL);
    OPEN(b, s, dir, NULL);
    uint64_t fa = 0, fb = 0;
    bool was_held;
    if (s->ttl_is_advisory) { /* flock */
        CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
        was_held = true;
        CHECK_RC(lock_break(b, &was_held), LOCK_ERR_UNSUPPORTED);
        CHECK_MSG(was_held == true, "was_held written on LOCK_ERR_UNSUPPORTED");
        was_held = false;
        CHECK_RC(lock_break(b, &was_held), LOCK_ERR_UNSUPPORTED);
        CHECK_MSG(was_held == false, "was_held written on LOCK_ERR_UNSUPPORTED");
        CHECK_RC(lock_try_acquire(b, NULL), LOCK_BUSY);
        CHECK_RC(lock_release(a, 0), LOCK_OK);
        CLOSE(a);
        CLOSE(b);
        return true;
    }
    was_held = true;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(!was_held, "breaking a free lock reports was_held");
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    was_held = false;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(was_held, "breaking a held lock reports !was_held");
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == fa, "after the break: held %d, last_fence %" PRIu64, (int)info.held,
              info.last_fence);
    was_held = true;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(!was_held, "the second break still found a lock");
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK);
    CHECK_MSG(fb > fa, "fence %" PRIu64 " after the broken %" PRIu64, fb, fa);
    CHECK_RC(lock_release(a, 0), LOCK_LOST); /* A's lock was broken */
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle, "A's release disturbed B's lock");
    CHECK_RC(lock_release(b, 0), LOCK_OK);

    /* broken, and nobody took it since: prolong and release still find
     * the lock lost (it never expired: there is no TTL), and change nothing */
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_RC(lock_prolong(a, 60000), LOCK_LOST);
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    lock_result released = lock_release(a, 0);
    CHECK_MSG(released == LOCK_LOST, "release of a broken lock nobody took returned %s, expected LOCK_LOST",
              rc_name(released));
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.cooldown_until_unix_ms == 0, "after the lost release: held %d, cooldown %" PRId64,
              (int)info.held, info.cooldown_until_unix_ms);
    CLOSE(a);
    CLOSE(b);
    return no_litter(s, dir);
}

static bool test_break(void) {
    return for_each_strategy(break_lock);
}

struct warning_log {
    struct warning_log *self; /* to check the context pointer */
    int calls;
    uint64_t first_ms, last_ms;
    bool wrong_context, went_backwards;
};

static void on_warning(void *context, uint64_t waited_ms) {
    struct warning_log *log = context;
    if (log == NULL || log->self != log) {
        if (log != NULL) log->wrong_context = true;
        return;
    }
    if (log->calls == 0) log->first_ms = waited_ms;
    if (log->calls > 0 && waited_ms < log->last_ms) log->went_backwards = true;
    log->last_ms = waited_ms;
    log->calls++;
}

/* lock_set_warning: the callback fires while lock_acquire waits, after wmin
 * and every wafter; never with warn=0, after clearing it, or before wmin. */
static bool warnings(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *waiter = NULL, *quiet = NULL, *patient = NULL;
    OPEN(holder, s, dir, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);

    OPEN(waiter, s, dir, "wmin=50ms&wafter=50ms");
    struct warning_log log;
    memset(&log, 0, sizeof log);
    log.self = &log;
    CHECK_RC(lock_set_warning(waiter, on_warning, &log), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 300, NULL), LOCK_TIMEOUT);
    CHECK_MSG(!log.wrong_context, "the callback got another context pointer");
    CHECK_MSG(log.calls >= 1, "no warning during a 300 ms wait with wmin=50ms");
    CHECK_MSG(log.first_ms >= 50, "the first warning came after %" PRIu64 " ms, before wmin=50ms", log.first_ms);
    CHECK_MSG(!log.went_backwards, "waited_ms went backwards");

    /* cleared with NULL: no more calls */
    int calls = log.calls;
    CHECK_RC(lock_set_warning(waiter, NULL, NULL), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 150, NULL), LOCK_TIMEOUT);
    CHECK_MSG(log.calls == calls, "a cleared callback was called");

    /* warn=0 silences it */
    OPEN(quiet, s, dir, "warn=0&wmin=50ms&wafter=50ms");
    struct warning_log silent;
    memset(&silent, 0, sizeof silent);
    silent.self = &silent;
    CHECK_RC(lock_set_warning(quiet, on_warning, &silent), LOCK_OK);
    CHECK_RC(lock_acquire(quiet, 300, NULL), LOCK_TIMEOUT);
    CHECK_MSG(silent.calls == 0, "warn=0 but the callback was called %d times", silent.calls);

    /* the default wmin (15 s) is not reached in 150 ms */
    OPEN(patient, s, dir, NULL);
    struct warning_log early;
    memset(&early, 0, sizeof early);
    early.self = &early;
    CHECK_RC(lock_set_warning(patient, on_warning, &early), LOCK_OK);
    CHECK_RC(lock_acquire(patient, 150, NULL), LOCK_TIMEOUT);
    CHECK_MSG(early.calls == 0, "a warning before the default wmin");

    /* no warning when the lock is free at once */
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    calls = log.calls;
    CHECK_RC(lock_set_warning(waiter, on_warning, &log), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_OK);
    CHECK_MSG(log.calls == calls, "a warning without any wait");
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(waiter);
    CLOSE(quiet);
    CLOSE(patient);
    return true;
}

/* lock_close made from a warning callback of a wait on the same handle:
 * the wait is still using the handle, so the close answers
 * LOCK_ERR_HANDLE_IN_USE and frees nothing; the handle works on. */
struct close_from_warning {
    lock_handle *h;
    int closed; /* what the callback's lock_close answered; -1 before */
};

static void close_own_handle_from_warning(void *context, uint64_t waited_ms) {
    (void)waited_ms;
    struct close_from_warning *how = context;
    if (how->closed == -1) how->closed = (int)lock_close(how->h);
}

static bool close_from_a_warning(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *waiter = NULL;
    OPEN(holder, s, dir, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    OPEN(waiter, s, dir, "wmin=20ms&wafter=20ms");
    struct close_from_warning how = {waiter, -1};
    CHECK_RC(lock_set_warning(waiter, close_own_handle_from_warning, &how), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 200, NULL), LOCK_TIMEOUT);
    CHECK_MSG(how.closed == LOCK_ERR_HANDLE_IN_USE, "lock_close from a warning of its own wait answered %d %s",
              how.closed, rc_name(how.closed));
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    CHECK_RC(lock_set_warning(waiter, NULL, NULL), LOCK_OK);
    CHECK_RC(lock_try_acquire(waiter, NULL), LOCK_OK);
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(waiter);
    CLOSE(holder);
    return true;
}

static bool test_close_from_a_warning_of_its_own_wait(void) {
    return for_each_strategy(close_from_a_warning);
}

static bool test_warning_callback(void) {
    return for_each_strategy(warnings);
}

/* During the warning callback, lock_last_error_message() names the lock, the
 * time waited and the holder; after a wait that succeeds, no message is left. */
static bool warning_names_holder(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *waiter = NULL;
    OPEN(holder, s, dir, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    char path[HARNESS_PATH_MAX];
    CHECK_RC(lock_path(holder, path, sizeof path, NULL), LOCK_OK);

    OPEN(waiter, s, dir, "wmin=50ms&wafter=50ms");
    struct warning_text text;
    memset(&text, 0, sizeof text);
    text.self = &text;
    CHECK_RC(lock_set_warning(waiter, keep_warning_text, &text), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 250, NULL), LOCK_TIMEOUT);
    CHECK_MSG(text.calls >= 1, "no warning during a 250 ms wait with wmin=50ms");
    char pid[32];
    snprintf(pid, sizeof pid, "held by pid %ld", (long)getpid());
    CHECK_MSG(strstr(text.first, path) != NULL, "the warning's text does not name the lock %s: \"%s\"", path,
              text.first);
    CHECK_MSG(strstr(text.first, "waited ") != NULL, "the warning's text does not say how long: \"%s\"", text.first);
    CHECK_MSG(strstr(text.first, pid) != NULL, "the warning's text does not name the holder (%s): \"%s\"", pid,
              text.first);

    /* a wait with warnings that then succeeds leaves no message: a child
     * holds the lock for 200 ms, past wmin */
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    CLOSE(holder);
    int ready[2];
    CHECK_MSG(pipe(ready) == 0, "pipe: %s", strerror(errno));
    pid_t child = fork();
    CHECK_MSG(child >= 0, "fork: %s", strerror(errno));
    if (child == 0) {
        lock_handle *h = NULL;
        if (open_lock(s, dir, NULL, &h) != LOCK_OK || lock_try_acquire(h, NULL) != LOCK_OK) _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(1);
        usleep(200 * 1000);
        _exit(lock_release(h, 0) == LOCK_OK && lock_close(h) == LOCK_OK ? 0 : 1);
    }
    close(ready[1]);
    char byte;
    CHECK_MSG(read(ready[0], &byte, 1) == 1, "the child did not take the lock");
    close(ready[0]);
    text.calls = 0;
    lock_result got = lock_acquire(waiter, 5000, NULL);
    char after[512];
    lock_last_error_message(after, sizeof after);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK_RC(got, LOCK_OK);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child holding the lock failed");
    CHECK_MSG(text.calls >= 1, "no warning during a wait of about 200 ms with wmin=50ms");
    CHECK_MSG(after[0] == '\0', "a wait that succeeded left a message: \"%s\"", after);
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(waiter);
    return true;
}

static bool test_warning_names_holder(void) {
    return for_each_strategy(warning_names_holder);
}

/* A cancel callback that answers true from its deadline on. */
struct canceller {
    struct canceller *self;
    int64_t cancel_at_ms; /* mono_ms() from which it answers true */
    int calls;
};

static bool cancel_when_due(void *context) {
    struct canceller *c = context;
    if (c == NULL || c->self != c) return false;
    c->calls++;
    return mono_ms() >= c->cancel_at_ms;
}

/* lock_set_cancel: a wait is given up with LOCK_CANCELLED soon after the
 * callback answers true, long before its budget, and its place in line with
 * it; a callback that answers true at once ends the call without an attempt;
 * lock_try_acquire does not ask it; NULL clears it. */
static bool cancel_a_wait(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *waiter = NULL, *third = NULL;
    OPEN(holder, s, dir, NULL);
    OPEN(waiter, s, dir, NULL);
    OPEN(third, s, dir, NULL);

    /* already true, before anyone ever waited for this lock: the first
     * attempt is not made either */
    struct canceller at_once = {.self = &at_once, .cancel_at_ms = 0, .calls = 0};
    CHECK_RC(lock_set_cancel(third, cancel_when_due, &at_once), LOCK_OK);
    CHECK_RC(lock_acquire(third, 1000, NULL), LOCK_CANCELLED);
    CHECK_MSG(at_once.calls == 1, "a callback that answered true was asked %d times", at_once.calls);
    CHECK_RC(lock_set_cancel(third, NULL, NULL), LOCK_OK);

    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    struct canceller c = {.self = &c, .cancel_at_ms = mono_ms() + 150, .calls = 0};
    CHECK_RC(lock_set_cancel(waiter, cancel_when_due, &c), LOCK_OK);
    uint64_t fence = FENCE_SENTINEL;
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(waiter, 20000, &fence), LOCK_CANCELLED);
    int64_t waited = mono_ms() - start;
    CHECK_MSG(waited >= 140, "cancelled after %" PRId64 " ms, before the callback said so", waited);
    CHECK_MSG(waited < 5000, "a wait cancelled at 150 ms returned after %" PRId64 " ms", waited);
    CHECK_MSG(c.calls >= 3, "the callback was asked %d times in a 150 ms wait", c.calls);
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out was written on LOCK_CANCELLED");
    char message[512];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(strstr(message, "cancelled") != NULL, "LOCK_CANCELLED's message: \"%s\"", message);

    /* the cancelled waiter left no place in line: the next comer, with a
     * zero budget, gets the lock as soon as it is released */
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    CHECK_RC(lock_acquire(third, 0, NULL), LOCK_OK);
    CHECK_RC(lock_release(third, 0), LOCK_OK);

    /* already true: no attempt, even on a free lock; a try does not ask */
    c.cancel_at_ms = 0;
    c.calls = 0;
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_CANCELLED);
    CHECK_MSG(c.calls == 1, "a callback that answered true was asked %d times", c.calls);
    lock_info info;
    CHECK_RC(lock_inspect(third, &info), LOCK_OK);
    CHECK_MSG(!info.held, "a cancelled call took the lock");
    CHECK_RC(lock_try_acquire(waiter, NULL), LOCK_OK);
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);

    /* cleared with NULL: waits as before */
    CHECK_RC(lock_set_cancel(waiter, NULL, NULL), LOCK_OK);
    c.calls = 0;
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_OK);
    CHECK_MSG(c.calls == 0, "a cleared callback was asked");
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(waiter);
    CLOSE(third);
    return no_litter(s, dir);
}

static bool test_cancel_callback(void) {
    return for_each_strategy(cancel_a_wait);
}

/* A thread cancelled with pthread_cancel while it waits in lock_acquire.
 * glibc cancels by unwinding the thread's stack; through the library, the
 * unwind would be caught at the call's boundary and glibc would abort the
 * whole process. The cancellation is held off until the call returns, and
 * acted on at the thread's next cancellation point. */
struct cancelled_waiter {
    lock_handle *h;
    int in_call;  /* 1 once the thread is about to call lock_acquire */
    int returned; /* 1000 + what lock_acquire returned, once it has */
};

static void *acquire_then_test_cancel(void *arg) {
    struct cancelled_waiter *w = arg;
    __atomic_store_n(&w->in_call, 1, __ATOMIC_SEQ_CST);
    lock_result rc = lock_acquire(w->h, LOCK_WAIT_FOREVER, NULL);
    __atomic_store_n(&w->returned, 1000 + (int)rc, __ATOMIC_SEQ_CST);
    pthread_testcancel();
    return NULL; /* not reached with a cancellation pending */
}

static bool cancelled_thread(const struct strategy *s, const char *dir) {
    lock_handle *holder = NULL, *waiter = NULL;
    OPEN(holder, s, dir, NULL);
    OPEN(waiter, s, dir, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    /* Static: a thread still in its call when the case fails writes here,
     * not into a frame that has returned. */
    static struct cancelled_waiter w;
    w = (struct cancelled_waiter){waiter, 0, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, acquire_then_test_cancel, &w) == 0);
    while (__atomic_load_n(&w.in_call, __ATOMIC_SEQ_CST) == 0) sleep_ms(1);
    sleep_ms(20); /* well into its wait, most likely; either way the cancellation waits for the call */
    CHECK(pthread_cancel(thread) == 0);
    sleep_ms(20);
    int returned = __atomic_load_n(&w.returned, __ATOMIC_SEQ_CST);
    CHECK_MSG(returned == 0, "lock_acquire returned %d %s on a held lock", returned - 1000, rc_name(returned - 1000));
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    void *ended = NULL;
    CHECK(pthread_join(thread, &ended) == 0);
    CHECK_MSG(ended == PTHREAD_CANCELED, "the thread was not cancelled once its call had returned");
    returned = __atomic_load_n(&w.returned, __ATOMIC_SEQ_CST);
    CHECK_MSG(returned == 1000 + LOCK_OK, "the cancelled thread's lock_acquire returned %d %s", returned - 1000,
              rc_name(returned - 1000));
    /* Its handle holds the lock: the thread ended before it could release. */
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(waiter);
    return no_litter(s, dir);
}

static bool test_a_thread_cancelled_in_a_wait_ends_after_it(void) {
    return for_each_strategy(cancelled_thread);
}

/* lock_path: the lock file / directory / flock'd file; too small a buffer. */
static bool path_of_lock(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    char expected[HARNESS_PATH_MAX];
    path_join(expected, sizeof expected, dir, s->lock_name);
    char buf[HARNESS_PATH_MAX];
    size_t len = 12345;
    CHECK_RC(lock_path(h, buf, sizeof buf, &len), LOCK_OK);
    CHECK_MSG(strcmp(buf, expected) == 0, "lock_path is \"%s\", expected \"%s\"", buf, expected);
    CHECK_MSG(len == strlen(expected), "len_out %zu for a path of %zu bytes", len, strlen(expected));
    CHECK_RC(lock_path(h, buf, sizeof buf, NULL), LOCK_OK);

    /* too small: nothing written to the buffer, and, as with snprintf, the
     * length needed (less the terminator) in *len_out */
    char tiny[4];
    memset(tiny, '#', sizeof tiny);
    size_t needed = 777;
    CHECK_RC(lock_path(h, tiny, sizeof tiny, &needed), LOCK_ERR_BUFFER_TOO_SMALL);
    CHECK_MSG(memcmp(tiny, "####", 4) == 0, "the buffer was written on LOCK_ERR_BUFFER_TOO_SMALL");
    CHECK_MSG(needed == len, "len_out is %zu on LOCK_ERR_BUFFER_TOO_SMALL; the path needs %zu", needed, len);
    /* exactly the length: no room for the terminator */
    memset(buf, '#', sizeof buf);
    needed = 777;
    CHECK_RC(lock_path(h, buf, len, &needed), LOCK_ERR_BUFFER_TOO_SMALL);
    for (size_t i = 0; i < len + 1; i++) CHECK_MSG(buf[i] == '#', "byte %zu written on BUFFER_TOO_SMALL", i);
    CHECK_MSG(needed == len, "len_out is %zu for a buffer one byte short; the path needs %zu", needed, len);
    /* the usual two calls: ask with no buffer, then allocate what it said */
    needed = 777;
    CHECK_RC(lock_path(h, buf, 0, &needed), LOCK_ERR_BUFFER_TOO_SMALL);
    CHECK_MSG(needed == len, "len_out is %zu for a zero-length buffer; the path needs %zu", needed, len);
    CHECK_RC(lock_path(h, buf, 0, NULL), LOCK_ERR_BUFFER_TOO_SMALL);
    /* and with no buffer at all, as snprintf(NULL, 0, ...) */
    needed = 777;
    CHECK_RC(lock_path(h, NULL, 0, &needed), LOCK_ERR_BUFFER_TOO_SMALL);
    CHECK_MSG(needed == len, "len_out is %zu for no buffer; the path needs %zu", needed, len);
    CHECK_RC(lock_path(h, NULL, 1, &needed), LOCK_ERR_NULL_ARGUMENT);
    char *exact = malloc(needed + 1);
    CHECK(exact != NULL);
    size_t got = 0;
    lock_result sized = lock_path(h, exact, needed + 1, &got);
    bool same = sized == LOCK_OK && got == len && strcmp(exact, expected) == 0;
    free(exact);
    CHECK_MSG(same, "a buffer of the length asked for: %s, %zu bytes", rc_name(sized), got);
    size_t tiny_len = 0;
    CHECK_RC(lock_path(h, buf, len + 1, &tiny_len), LOCK_OK);
    CHECK_MSG(buf[len] == '\0' && buf[len + 1] == '#' && tiny_len == len, "lock_path wrote past its terminator");
    CHECK(strcmp(buf, expected) == 0);

    /* that path is what holds the lock */
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    struct stat st;
    CHECK_MSG(lstat(expected, &st) == 0, "%s does not exist while held", expected);
    bool kind_ok = s->lock_kind == 'd'   ? S_ISDIR(st.st_mode)
                   : s->lock_kind == 'l' ? S_ISLNK(st.st_mode)
                                         : S_ISREG(st.st_mode);
    CHECK_MSG(kind_ok, "%s is not a %s", expected,
              s->lock_kind == 'd' ? "directory" : s->lock_kind == 'l' ? "symbolic link" : "regular file");
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_lock_path(void) {
    return for_each_strategy(path_of_lock);
}

/* The lockfile strategy's LockFile::Simple compatibility: lock file names
 * (ext, format), mode, and the first line `PID` or, with nfs=1, `PID:HOST`. */
static bool lockfile_layout(const char *dir, const char *options, const char *lock_name, mode_t mode, bool nfs) {
    SCHEME(s, "lockfile");
    lock_handle *h = NULL;
    OPEN(h, s, dir, options);
    char lock[HARNESS_PATH_MAX], reported[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, lock_name);
    CHECK_RC(lock_path(h, reported, sizeof reported, NULL), LOCK_OK);
    CHECK_MSG(strcmp(reported, lock) == 0, "with %s the lock file is \"%s\", expected \"%s\"", options, reported, lock);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    struct stat st;
    CHECK_MSG(lstat(lock, &st) == 0 && S_ISREG(st.st_mode), "with %s, %s is not a file while held", options, lock);
    CHECK_MSG((st.st_mode & 07777) == mode, "with %s the lock file has mode %04o, expected %04o", options,
              (unsigned)(st.st_mode & 07777), (unsigned)mode);
    char content[1024], first[512], host[256] = "";
    CHECK(read_file(lock, content, sizeof content) > 0);
    CHECK(gethostname(host, sizeof host - 1) == 0);
    if (nfs) {
        format_into(first, sizeof first, "%ld:%s\nlockcore 2 ", (long)getpid(), host);
    } else {
        format_into(first, sizeof first, "%ld\nlockcore 2 ", (long)getpid());
    }
    CHECK_MSG(strncmp(content, first, strlen(first)) == 0, "with %s the lock file starts \"%.40s\", expected \"%s\"",
              options, content, first);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_MSG(!path_exists(lock), "%s remains after release", lock);
    CLOSE(h);
    return true;
}

/* The lock file is a read-only record: the read bits of `mode` (0600 by
 * default: 0400), whatever the umask (022 here, 077 in a second round).
 * `%p` in a format would give each process a lock file of its own, and a
 * format or ext naming the target would make it its own lock: both are
 * refused (errors.c, test_spec_bad_value). */
static bool test_lockfile_names_mode_and_stamp(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "layout"));
    bool ok = true;
    for (int round = 0; round < 2 && ok; round++) {
        mode_t old = umask(round == 0 ? 022 : 077);
        ok = lockfile_layout(dir, NULL, "data.lock", 0400, false) &&
             lockfile_layout(dir, "nfs=1", "data.lock", 0400, true) &&
             lockfile_layout(dir, "ext=.lck", "data.lck", 0400, false) &&
             lockfile_layout(dir, "format=%25D/.%25F.lk", ".data.lk", 0400, false) &&
             lockfile_layout(dir, "mode=0660", "data.lock", 0440, false) &&
             lockfile_layout(dir, "mode=0666", "data.lock", 0444, false);
        umask(old);
    }
    return ok;
}

/* A child that blocks until its parent writes to or closes `wait_fd`. */
static void child_idle(int wait_fd) {
    char byte;
    ssize_t n;
    do {
        n = read(wait_fd, &byte, 1);
    } while (n < 0 && errno == EINTR);
    _exit(0);
}

/* Locks held by other programs: a LockFile::Simple stamp (`PID` of a live
 * or dead process, `PID:HOST` of another host), a plain mkdir lock, and an
 * IPC::Lock::WithTTL symlink. (flock has no foreign format: any program's
 * flock excludes it in the kernel. lease and toplock are formats of this
 * library only.) */
static bool test_foreign_locks(void) {
    char dir[HARNESS_PATH_MAX], lock[HARNESS_PATH_MAX], stamp[64];
    CHECK(make_temp_dir(dir, sizeof dir, "foreign"));
    SCHEME(lockfile, "lockfile");
    SCHEME(mkdir_scheme, "mkdir");
    SCHEME(symlink_scheme, "symlink");
    path_join(lock, sizeof lock, dir, lockfile->lock_name);
    lock_handle *h = NULL;
    OPEN(h, lockfile, dir, NULL);

    /* a live process's stamp excludes us */
    int idle[2];
    CHECK(pipe(idle) == 0);
    pid_t live = fork_child();
    CHECK(live >= 0);
    if (live == 0) {
        close(idle[1]);
        child_idle(idle[0]);
    }
    close(idle[0]);
    snprintf(stamp, sizeof stamp, "%ld\n", (long)live);
    CHECK(write_file(lock, stamp, strlen(stamp), 0444));
    uint64_t fence = FENCE_SENTINEL;
    lock_result busy = lock_try_acquire(h, &fence);
    lock_info info;
    lock_result inspected = lock_inspect(h, &info);
    close(idle[1]); /* the child exits */
    int status = wait_child(live);
    CHECK_MSG(busy == LOCK_BUSY, "a live LockFile::Simple holder's lock: %s", rc_name(busy));
    CHECK_MSG(inspected == LOCK_OK && info.held && !info.held_by_this_handle && info.owner_pid == (int32_t)live &&
                  info.fence == 0 && info.owner_liveness == LOCK_OWNER_ALIVE,
              "inspect of a LockFile::Simple stamp: %s, held %d, pid %d (want %ld), fence %" PRIu64 ", liveness %d",
              rc_name(inspected), (int)info.held, (int)info.owner_pid, (long)live, info.fence,
              (int)info.owner_liveness);
    CHECK(status != -1 && WIFEXITED(status));

    /* the same pid, now dead (reaped): stale at once with stale=pid */
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    /* PID:HOST of another host is never judged dead by pid */
    snprintf(stamp, sizeof stamp, "%ld:other-host.example\n", (long)live);
    CHECK(write_file(lock, stamp, strlen(stamp), 0444));
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_BUSY);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.owner_liveness == LOCK_OWNER_UNKNOWN && strcmp(info.owner_host, "other-host.example") == 0,
              "another host's stamp: liveness %d, host \"%s\"", (int)info.owner_liveness, info.owner_host);
    CHECK(unlink(lock) == 0);
    CLOSE(h);

    /* a plain `mkdir` lock, as a shell script takes it, excludes the mkdir strategy */
    char lockdir[HARNESS_PATH_MAX];
    path_join(lockdir, sizeof lockdir, dir, mkdir_scheme->lock_name);
    CHECK(mkdir(lockdir, 0755) == 0);
    OPEN(h, mkdir_scheme, dir, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_BUSY);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale, "an empty lock directory is not reported held");
    CHECK(rmdir(lockdir) == 0);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);

    /* an IPC::Lock::WithTTL link (target "<name>.<pid>", mtime the
     * expiry) excludes the symlink strategy until its mtime has passed */
    char link_path[HARNESS_PATH_MAX], seen[256];
    path_join(link_path, sizeof link_path, dir, symlink_scheme->lock_name);
    snprintf(stamp, sizeof stamp, "ipc-lock-withttl.%ld", (long)getpid());
    CHECK(symlink(stamp, link_path) == 0);
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec += 3600;
    times[1] = times[0];
    CHECK(utimensat(AT_FDCWD, link_path, times, AT_SYMLINK_NOFOLLOW) == 0);
    OPEN(h, symlink_scheme, dir, "ttl=10s");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_BUSY);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale && !info.held_by_this_handle && info.owner_pid == 0 && info.fence == 0,
              "a foreign link expiring in an hour: held %d, stale %d, pid %d, fence %" PRIu64, (int)info.held,
              (int)info.stale, (int)info.owner_pid, info.fence);
    /* its mtime moved an hour into the past: expired, broken, taken */
    times[0].tv_sec -= 7200;
    times[1] = times[0];
    CHECK(utimensat(AT_FDCWD, link_path, times, AT_SYMLINK_NOFOLLOW) == 0);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && info.stale, "a foreign link whose mtime has passed: held %d, stale %d", (int)info.held,
              (int)info.stale);
    uint64_t taken = 0;
    CHECK_RC(lock_try_acquire(h, &taken), LOCK_OK);
    ssize_t n = readlink(link_path, seen, sizeof seen - 1);
    CHECK(n > 0);
    seen[n] = '\0';
    CHECK_MSG(strncmp(seen, "lockcore 2 ", 11) == 0, "after taking it the link points to \"%s\"", seen);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_MSG(!path_exists(link_path), "the link remains after release");
    CLOSE(h);
    return true;
}

/* A spec whose target is an existing data file, the mistake a CGI program
 * makes when it names the file it protects: the file stays byte for byte
 * as it was (same inode, size, mode and mtime), whatever the calls. lockfile
 * keeps its lock in <target>.lock beside it, and flock locks the file
 * itself as flock(1) does, opened read-only: both take the lock. Every other
 * scheme keeps its lock at its target, finds there a file in no format of
 * its own, and refuses it as not a lock, for acquire, inspect and break. An
 * empty file is no lock either: the library never leaves one. */
static bool data_file_kept(const struct strategy *s, const char *dir) {
    static const char *contents[] = {"count=41\nname=board\n\xff\xfe binary too\n", ""};
    char data[HARNESS_PATH_MAX];
    path_join(data, sizeof data, dir, s->target);
    bool takes = strcmp(s->lock_name, s->target) != 0 || strcmp(s->name, "flock") == 0;
    for (size_t c = 0; c < sizeof contents / sizeof contents[0]; c++) {
        size_t len = strlen(contents[c]);
        CHECK(write_file(data, contents[c], len, 0644));
        struct stat before;
        CHECK(lstat(data, &before) == 0);
        lock_handle *h = NULL, *other = NULL;
        OPEN(h, s, dir, "ttl=10s");
        OPEN(other, s, dir, NULL);
        uint64_t fence = FENCE_SENTINEL;
        lock_info info;
        bool was_held = false;
        if (takes) {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
            CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
            CHECK_RC(lock_inspect(other, &info), LOCK_OK);
            CHECK_MSG(info.held && info.fence == fence, "inspect: held %d, fence %" PRIu64, (int)info.held,
                      info.fence);
            CHECK_RC(lock_prolong(h, 20000), LOCK_OK);
            CHECK_RC(lock_release(h, 1), LOCK_OK);
            CHECK_RC(lock_acquire(other, 5000, NULL), LOCK_OK);
            CHECK_RC(lock_close(other), LOCK_OK); /* releases it */
        } else {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_NOT_A_LOCK);
            CHECK_RC(lock_acquire(h, 5000, &fence), LOCK_ERR_NOT_A_LOCK);
            CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on LOCK_ERR_NOT_A_LOCK");
            CHECK_RC(lock_inspect(other, &info), LOCK_ERR_NOT_A_LOCK);
            CHECK_RC(lock_break(other, &was_held), LOCK_ERR_NOT_A_LOCK);
            CLOSE(other);
        }
        CLOSE(h);
        struct stat after;
        static char now[256];
        CHECK(lstat(data, &after) == 0);
        ssize_t now_len = read_file(data, now, sizeof now);
        CHECK_MSG(now_len == (ssize_t)len && memcmp(now, contents[c], len) == 0,
                  "the data file now holds \"%.60s\" (%zd bytes)", now, now_len);
        CHECK_MSG(S_ISREG(after.st_mode) && after.st_ino == before.st_ino && after.st_mode == before.st_mode &&
                      after.st_size == before.st_size && after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
                      after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
                  "the data file was replaced, touched or its mode changed (mode %04o, was %04o)",
                  (unsigned)(after.st_mode & 07777), (unsigned)(before.st_mode & 07777));
        /* what the lock left beside it: its guard (made before the lock
         * path is looked at), the turnstile of a lock someone waited for,
         * and nothing else */
        char turnstile[256];
        snprintf(turnstile, sizeof turnstile, "%s.turnstile", s->lock_name);
        const char *allowed[] = {s->target, turnstile, s->guard_name, NULL};
        if (!only_entries(dir, allowed)) return false;
    }
    return true;
}

static bool test_data_file_kept(void) {
    return for_each_strategy(data_file_kept);
}

/* A path longer than PATH_MAX, for lock_commit. */
static char too_long_path[HARNESS_PATH_MAX + 64];

/* In a child of the holder: every call on the inherited handle but
 * lock_close answers LOCK_ERR_FORKED, those that touch no lock file too,
 * and whatever else is wrong with the arguments (but a NULL handle): the
 * handle is the first thing a call judges. Closing it (or exiting) leaves
 * the parent's lock. */
static bool forked_handle_child(lock_handle *h, bool close_it) {
    memset(too_long_path, 'x', sizeof too_long_path - 1);
    too_long_path[sizeof too_long_path - 1] = '\0';
    CHECK_RC(lock_release(h, UINT64_MAX), LOCK_ERR_FORKED);
    CHECK_RC(lock_prolong(h, UINT64_MAX), LOCK_ERR_FORKED);
    CHECK_RC(lock_commit(h, too_long_path, "no-such-target"), LOCK_ERR_FORKED);
    CHECK_RC(lock_commit(h, "no-such-temp", too_long_path), LOCK_ERR_FORKED);
    CHECK_RC(lock_commit(h, NULL, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_inspect(h, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_path(h, NULL, 0, NULL), LOCK_ERR_FORKED);
    char tiny[1];
    CHECK_RC(lock_path(h, tiny, sizeof tiny, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_acquire(h, LOCK_WAIT_FOREVER, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_break(h, NULL), LOCK_ERR_FORKED);

    CHECK_RC(lock_release(h, 0), LOCK_ERR_FORKED);
    CHECK_RC(lock_release(h, 500), LOCK_ERR_FORKED);
    CHECK_RC(lock_prolong(h, 1000), LOCK_ERR_FORKED);
    CHECK_RC(lock_prolong(h, 0), LOCK_ERR_FORKED);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_acquire(h, 0, NULL), LOCK_ERR_FORKED);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_FORKED);
    bool was_held = false;
    CHECK_RC(lock_break(h, &was_held), LOCK_ERR_FORKED);
    CHECK_RC(lock_commit(h, "no-such-temp", "no-such-target"), LOCK_ERR_FORKED);
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_autorenew_stop(h), LOCK_ERR_FORKED);
    CHECK_RC(lock_set_warning(h, NULL, NULL), LOCK_ERR_FORKED);
    char path[HARNESS_PATH_MAX];
    CHECK_RC(lock_path(h, path, sizeof path, NULL), LOCK_ERR_FORKED);
    if (close_it) lock_close(h);
    return true;
}

static bool fork_keeps_parent_lock(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=1h");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    for (int variant = 0; variant < 2; variant++) {
        int errors[2];
        CHECK(pipe(errors) == 0);
        pid_t pid = fork_child();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* variant 0 closes the inherited handle; variant 1 leaves it to
             * exit(), whose autoclean must not release the parent's lock,
             * nor complain that it could not: it is not the child's */
            close(errors[0]);
            if (dup2(errors[1], STDERR_FILENO) < 0) _exit(1);
            child_exit_normally(forked_handle_child(h, variant == 0));
        }
        close(errors[1]);
        CHECK_CHILD_OK(pid);
        char said[512];
        ssize_t n = read(errors[0], said, sizeof said - 1);
        close(errors[0]);
        said[n > 0 ? n : 0] = '\0';
        CHECK_MSG(n == 0, "the child (variant %d) wrote to stderr: \"%s\"", variant, said);
        uint64_t probe = FENCE_SENTINEL;
        CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
        lock_info info;
        CHECK_RC(lock_inspect(h, &info), LOCK_OK);
        CHECK_MSG(info.held_by_this_handle && info.owner_pid == (int32_t)getpid() && info.fence == fence &&
                      info.cooldown_until_unix_ms == 0,
                  "after the child (variant %d) the parent's lock changed: by this %d, pid %d, fence %" PRIu64, variant,
                  (int)info.held_by_this_handle, (int)info.owner_pid, info.fence);
    }
    CHECK_RC(lock_prolong(h, 0), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_fork_child_cannot_release(void) {
    return for_each_strategy(fork_keeps_parent_lock);
}

/* A child may acquire through a handle that held nothing at fork time; it is
 * a new owner with its own pid, excluded from and excluding the parent. */
static bool child_acquires(lock_handle *h, int report_fd, int go_fd) {
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.owner_pid == (int32_t)getpid(),
              "in the child: by this %d, owner_pid %d, getpid %d", (int)info.held_by_this_handle, (int)info.owner_pid,
              (int)getpid());
    CHECK(write_exact(report_fd, &fence, sizeof fence));
    char go;
    CHECK(read_exact(go_fd, &go, 1));
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool fork_child_own_lock(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, NULL);
    OPEN(other, s, dir, NULL);
    int report[2], go[2];
    CHECK(pipe(report) == 0 && pipe(go) == 0);
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(report[0]);
        close(go[1]);
        child_exit(child_acquires(h, report[1], go[0]));
    }
    close(report[1]);
    close(go[0]);
    uint64_t child_fence = 0;
    bool reported = read_exact(report[0], &child_fence, sizeof child_fence);
    lock_result parent_try = LOCK_OK, other_try = LOCK_OK, inspected = LOCK_ERR_PANIC;
    lock_info info;
    memset(&info, 0, sizeof info);
    if (reported) {
        parent_try = lock_try_acquire(h, NULL);
        other_try = lock_try_acquire(other, NULL);
        inspected = lock_inspect(other, &info);
        write_exact(go[1], "g", 1);
    }
    close(go[1]);
    close(report[0]);
    CHECK_CHILD_OK(pid);
    CHECK_MSG(reported, "the child did not report its acquisition");
    CHECK_MSG(parent_try == LOCK_BUSY && other_try == LOCK_BUSY,
              "while the child holds: the parent's copy of the handle got %s, another handle %s", rc_name(parent_try),
              rc_name(other_try));
    CHECK_MSG(inspected == LOCK_OK && info.held && info.owner_pid == (int32_t)pid && info.fence == child_fence,
              "inspect while the child holds: %s, pid %d (child %ld), fence %" PRIu64 " (child's %" PRIu64 ")",
              rc_name(inspected), (int)info.owner_pid, (long)pid, info.fence, child_fence);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_MSG(fence > child_fence, "fence %" PRIu64 " after the child's %" PRIu64, fence, child_fence);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_fork_child_acquires_its_own(void) {
    return for_each_strategy(fork_child_own_lock);
}

/* Autoclean: a child that acquires and calls exit(0) without releasing
 * leaves the lock free. stale=none and ttl=1h, so that neither dead-owner
 * detection nor age can explain it. */
static bool child_acquires_and_exits(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=1h&stale=none");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    return true; /* no lock_release, no lock_close */
}

static bool autoclean(const struct strategy *s, const char *dir) {
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) child_exit_normally(child_acquires_and_exits(s, dir));
    CHECK_CHILD_OK(pid);
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=1h&stale=none");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence > 0, "after the child's exit(0): held %d (pid %d), last_fence %" PRIu64,
              (int)info.held, (int)info.owner_pid, info.last_fence);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return no_litter(s, dir);
}

static bool test_autoclean_at_exit(void) {
    return for_each_strategy(autoclean);
}

/* Runs `body(arg)` in a child that leaves by exit(), so that exit handlers
 * run (the library's autoclean among them), and that SIGALRM kills after
 * `seconds`: a call that deadlocks, during exit() too, fails the case and
 * leaves this process usable, instead of hanging the program. */
static bool in_child_with_deadline(bool (*body)(void *), void *arg, unsigned seconds) {
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(seconds);
        child_exit_normally(body(arg));
    }
    int status = wait_child(pid);
    char text[64];
    CHECK_MSG(status == -1 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGALRM,
              "child %ld hung: still running %u s later", (long)pid, seconds);
    CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %ld %s (its failure is printed above)", (long)pid, describe_status(status, text, sizeof text));
    return true;
}

/* After a child: the mkdir lock in `dir` (and with `also_lockfile`, the
 * lockfile lock beside it) was taken and is free again. */
static bool left_free(const char *dir, bool also_lockfile) {
    const char *names[] = {"mkdir", "lockfile"};
    for (size_t i = 0; i < (also_lockfile ? 2u : 1u); i++) {
        SCHEME(s, names[i]);
        lock_handle *h = NULL;
        OPEN(h, s, dir, NULL);
        lock_info info;
        CHECK_RC(lock_inspect(h, &info), LOCK_OK);
        CLOSE(h);
        CHECK_MSG(!info.held && info.last_fence > 0, "%s lock after the child: held %d (pid %d), last_fence %" PRIu64,
                  s->name, (int)info.held, (int)info.owner_pid, info.last_fence);
    }
    return true;
}

/* A program's own atexit handler that releases and closes, as a program
 * cleaning up at exit does. exit() has destroyed the thread's locals by
 * then, which must not abort the process. (It runs before the library's
 * autoclean, registered earlier: the release is its own.) */
static lock_handle *released_at_exit;

static void release_at_exit(void) {
    lock_result released = lock_release(released_at_exit, 0);
    char message[64];
    lock_last_error_message(message, sizeof message);
    lock_result closed = lock_close(released_at_exit);
    if (released != LOCK_OK || closed != LOCK_OK) {
        printf("    child %ld: in an atexit handler lock_release returned %s, lock_close %s\n", (long)getpid(),
               rc_name(released), rc_name(closed));
        fflush(stdout);
        _exit(1);
    }
}

static bool acquire_and_release_at_exit(void *dir) {
    SCHEME(s, "mkdir");
    OPEN(released_at_exit, s, (const char *)dir, "ttl=1h&stale=none");
    CHECK_RC(lock_try_acquire(released_at_exit, NULL), LOCK_OK);
    CHECK(atexit(release_at_exit) == 0);
    return true;
}

static bool test_release_in_atexit_handler(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "atexit"));
    return in_child_with_deadline(acquire_and_release_at_exit, dir, 30) && left_free(dir, false);
}

/* A watchdog's lost callback that releases another handle (as the contract
 * allows) while the main thread closes the watchdog's handle, or exits:
 * either waits for the callback, which must not wait for it in turn. */
struct release_on_lost {
    lock_handle *other; /* released by the callback */
    int entered_w;      /* a byte is written here when the callback starts */
};

static void release_other_on_lost(void *context) {
    const struct release_on_lost *how = context;
    char byte = 'L';
    if (write(how->entered_w, &byte, 1) != 1) return;
    /* Lets the main thread get into lock_close or exit() first, which makes
     * a deadlock all but certain; a correct library passes at any timing. */
    sleep_ms(200);
    lock_release(how->other, 0);
}

/* Static: during exit() the callback outlives the child's stack frames. */
static struct release_on_lost lost_while_leaving;

static bool lose_renewed_lock_then_leave(const char *dir, bool by_exit) {
    SCHEME(mkdir_scheme, "mkdir");
    SCHEME(lockfile, "lockfile");
    lock_handle *renewed = NULL, *breaker = NULL, *other = NULL;
    OPEN(renewed, mkdir_scheme, dir, "ttl=300ms");
    OPEN(breaker, mkdir_scheme, dir, NULL);
    OPEN(other, lockfile, dir, NULL);
    int entered[2];
    CHECK(pipe(entered) == 0);
    lost_while_leaving.other = other;
    lost_while_leaving.entered_w = entered[1];
    CHECK_RC(lock_try_acquire(renewed, NULL), LOCK_OK);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(renewed, release_other_on_lost, &lost_while_leaving), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(breaker, &was_held), LOCK_OK);
    CLOSE(breaker);
    char byte;
    CHECK(read_exact(entered[0], &byte, 1)); /* the callback has started */
    if (by_exit) return true;                /* exit(), with both holding handles open */
    /* the handle still has the acquisition the breaker took away: its
     * release finds it lost, and lock_close says so */
    CHECK_RC(lock_close(renewed), LOCK_LOST);
    CLOSE(other);
    return true;
}

static bool close_while_lost_callback_releases(void *dir) {
    return lose_renewed_lock_then_leave(dir, false);
}

static bool exit_while_lost_callback_releases(void *dir) {
    return lose_renewed_lock_then_leave(dir, true);
}

static bool test_close_while_lost_callback_releases(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "close-lost"));
    return in_child_with_deadline(close_while_lost_callback_releases, dir, 30) && left_free(dir, true);
}

static bool test_exit_while_lost_callback_releases(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "exit-lost"));
    return in_child_with_deadline(exit_while_lost_callback_releases, dir, 30) && left_free(dir, true);
}

/* The lost callback stops its own watchdog, through its own handle, as the
 * contract allows: the watchdog cannot wait for itself, but the call still
 * succeeds (the watchdog ends when the callback returns). */
struct stop_on_lost {
    lock_handle *h;
    int result; /* written by the watchdog's thread */
    int entered_w;
};

static void stop_own_watchdog(void *context) {
    struct stop_on_lost *how = context;
    __atomic_store_n(&how->result, (int)lock_autorenew_stop(how->h), __ATOMIC_SEQ_CST);
    char byte = 'S';
    if (write(how->entered_w, &byte, 1) != 1) return;
}

static bool test_lost_callback_stops_own_watchdog(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "stop-own"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *breaker = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(breaker, s, dir, NULL);
    int done[2];
    CHECK(pipe(done) == 0);
    struct stop_on_lost how = {h, -1, done[1]};
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, stop_own_watchdog, &how), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(breaker, &was_held), LOCK_OK);
    char byte;
    CHECK(read_exact(done[0], &byte, 1));
    int stopped = __atomic_load_n(&how.result, __ATOMIC_SEQ_CST);
    CHECK_MSG(stopped == LOCK_OK, "lock_autorenew_stop from the lost callback returned %d %s", stopped,
              rc_name(stopped));
    CHECK_RC(lock_release(h, 0), LOCK_LOST);
    CLOSE(h);
    CLOSE(breaker);
    close(done[0]);
    close(done[1]);
    return true;
}

/* The lost callback releases and closes its own handle, as the contract
 * allows when no other thread uses it: the release answers LOCK_LOST
 * without waiting for the watchdog, and once the handle is freed the
 * watchdog's thread, which ends after the callback, touches it no more
 * (memcheck would see it). */
struct close_on_lost {
    lock_handle *h;
    int released; /* written by the watchdog's thread */
    int closed;
    int done_w;
};

static void release_and_close_own_handle(void *context) {
    struct close_on_lost *how = context;
    __atomic_store_n(&how->released, (int)lock_release(how->h, 0), __ATOMIC_SEQ_CST);
    __atomic_store_n(&how->closed, (int)lock_close(how->h), __ATOMIC_SEQ_CST);
    char byte = 'C';
    if (write(how->done_w, &byte, 1) != 1) return;
}

static bool test_lost_callback_closes_own_handle(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "close-own"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *breaker = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(breaker, s, dir, NULL);
    int done[2];
    CHECK(pipe(done) == 0);
    struct close_on_lost how = {h, -1, -1, done[1]};
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, release_and_close_own_handle, &how), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(breaker, &was_held), LOCK_OK);
    char byte;
    CHECK(read_exact(done[0], &byte, 1)); /* from here on, h is freed */
    int released = __atomic_load_n(&how.released, __ATOMIC_SEQ_CST);
    CHECK_MSG(released == LOCK_LOST, "lock_release from the lost callback returned %d %s", released,
              rc_name(released));
    int closed = __atomic_load_n(&how.closed, __ATOMIC_SEQ_CST);
    CHECK_MSG(closed == LOCK_OK, "lock_close from the lost callback, holding nothing, returned %d %s", closed,
              rc_name(closed));
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(breaker, &fence), LOCK_OK);
    CHECK_RC(lock_release(breaker, 0), LOCK_OK);
    CLOSE(breaker);
    close(done[0]);
    close(done[1]);
    return true;
}

/* lock_close made on another thread while the lost callback, which has
 * stopped its own watchdog (its lock_prolong found the lock lost), waits in
 * a call on the handle: the close waits for the callback to return before
 * it frees the handle (memcheck and AddressSanitizer would see a use after
 * the free). The callback's wait either ends by its deadline or, once the
 * close has the handle, answers LOCK_ERR_HANDLE_IN_USE. */
struct wait_on_lost {
    lock_handle *h;
    int prolonged; /* written by the watchdog's thread */
    int acquired;
    int returned;
    int entered_w;
    int thief_holds; /* written by the case once its thief has the lock */
};

static void prolong_then_wait_on_own_handle(void *context) {
    struct wait_on_lost *how = context;
    __atomic_store_n(&how->prolonged, (int)lock_prolong(how->h, 0), __ATOMIC_SEQ_CST);
    /* A watchdog that started late finds the loss as soon as the lock is
     * broken: its wait must not take the lock before the thief does. */
    for (int waited_ms = 0; !__atomic_load_n(&how->thief_holds, __ATOMIC_SEQ_CST) && waited_ms < 5000; waited_ms++) {
        sleep_ms(1);
    }
    char byte = 'W';
    if (write(how->entered_w, &byte, 1) != 1) return;
    __atomic_store_n(&how->acquired, (int)lock_acquire(how->h, 300, NULL), __ATOMIC_SEQ_CST);
    __atomic_store_n(&how->returned, 1, __ATOMIC_SEQ_CST);
}

/* How many threads this process has, from /proc/self/task; -1 if unknown. */
static int thread_count(void) {
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == NULL) return -1;
    int count = 0;
    for (struct dirent *entry; (entry = readdir(tasks)) != NULL;) {
        if (entry->d_name[0] != '.') count++;
    }
    closedir(tasks);
    return count;
}

/* The handles, opened but not used yet, of one round of the case below. */
struct close_waits_handles {
    lock_handle *h, *thief;
};

static bool close_waits_for_lost_callback(void *arg) {
    const struct close_waits_handles *with = arg;
    lock_handle *h = with->h, *thief = with->thief;
    int entered[2];
    CHECK(pipe(entered) == 0);
    /* Static, not on this frame: should the case fail before the callback
     * has run, the callback, still to come, writes here and not into a
     * frame that has returned. */
    static struct wait_on_lost how;
    how = (struct wait_on_lost){h, -1, -1, 0, entered[1], 0};
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, prolong_then_wait_on_own_handle, &how), LOCK_OK);
    bool was_held = false;
    CHECK_RC(lock_break(thief, &was_held), LOCK_OK);
    CHECK_RC(lock_try_acquire(thief, NULL), LOCK_OK);
    __atomic_store_n(&how.thief_holds, 1, __ATOMIC_SEQ_CST);
    char byte;
    CHECK(read_exact(entered[0], &byte, 1)); /* the callback has stopped its watchdog */
    int prolonged = __atomic_load_n(&how.prolonged, __ATOMIC_SEQ_CST);
    CHECK_MSG(prolonged == LOCK_LOST, "lock_prolong from the lost callback returned %d %s", prolonged,
              rc_name(prolonged));
    CHECK_RC(lock_close(h), LOCK_OK);
    CHECK_MSG(__atomic_load_n(&how.returned, __ATOMIC_SEQ_CST) == 1,
              "lock_close returned while the lost callback was still in a call on the handle");
    int acquired = __atomic_load_n(&how.acquired, __ATOMIC_SEQ_CST);
    CHECK_MSG(acquired == LOCK_TIMEOUT || acquired == LOCK_ERR_HANDLE_IN_USE,
              "the callback's lock_acquire, raced by lock_close, returned %d %s", acquired, rc_name(acquired));
    CHECK_RC(lock_release(thief, 0), LOCK_OK);
    CLOSE(thief);
    close(entered[0]);
    close(entered[1]);
    /* The watchdog's thread, which the callback stopped, ends on its own
     * once the callback has returned. Waited for here, so that the next
     * case does not fork while it is still leaving: a child forked while a
     * thread holds AddressSanitizer's allocator (which, unlike glibc's
     * malloc, is not locked across fork) would hang at its first thread. */
    for (int waited_ms = 0; thread_count() > 1 && waited_ms < 5000; waited_ms++) sleep_ms(1);
    CHECK_MSG(thread_count() == 1, "the watchdog's thread is still running: %d threads", thread_count());
    return true;
}

/* Once here, and once in a child of fork() through handles its parent
 * opened and never used, which the child may use as its own. */
static bool test_close_waits_for_a_lost_callback_in_a_call(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "close-waits"));
    SCHEME(s, "lease");
    struct close_waits_handles here = {NULL, NULL}, inherited = {NULL, NULL};
    OPEN(here.h, s, dir, "ttl=300ms");
    OPEN(here.thief, s, dir, NULL);
    if (!close_waits_for_lost_callback(&here)) return false;
    OPEN(inherited.h, s, dir, "ttl=300ms");
    OPEN(inherited.thief, s, dir, NULL);
    bool child_ok = in_child_with_deadline(close_waits_for_lost_callback, &inherited, 30);
    CLOSE(inherited.h);
    CLOSE(inherited.thief);
    return child_ok;
}

/* fork() while a watchdog runs: the child has the handle, not the thread.
 * Closing the inherited handle must touch nothing of that thread (not its
 * state's mutex, not its id): glibc gives the id to the child's next
 * thread, here the watchdog of a lock the child takes itself, which must
 * still stop cleanly. */
struct renewed_at_fork {
    lock_handle *inherited;
    const char *dir;
};

static bool child_closes_renewed_handle(void *arg) {
    const struct renewed_at_fork *at_fork = arg;
    SCHEME(s, "lockfile");
    lock_handle *own = NULL;
    OPEN(own, s, at_fork->dir, "ttl=300ms");
    CHECK_RC(lock_try_acquire(own, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(own, NULL, NULL), LOCK_OK);
    CLOSE(at_fork->inherited);
    CHECK_RC(lock_release(own, 0), LOCK_OK);
    CLOSE(own);
    return true;
}

static bool test_fork_child_closes_renewed_handle(void) {
    if (getenv("LOCKFFI_UNDER_MEMCHECK") != NULL) {
        SKIP("under memcheck: a child of fork() cannot free what its parent's watchdog thread holds, which memcheck "
             "counts as definitely lost");
    }
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "fork-renewed"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK);
    struct renewed_at_fork at_fork = {h, dir};
    bool child_ok = in_child_with_deadline(child_closes_renewed_handle, &at_fork, 30);
    sleep_ms(900); /* three TTLs: the parent's lock is still renewed */
    lock_info info;
    lock_result inspected = lock_inspect(h, &info);
    lock_result released = lock_release(h, 0);
    lock_close(h); /* before any check: no watchdog may outlive the case */
    if (!child_ok) return false;
    CHECK_RC(inspected, LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && !info.stale, "after the child: held by this %d, stale %d",
              (int)info.held_by_this_handle, (int)info.stale);
    CHECK_RC(released, LOCK_OK);
    return left_free(dir, true);
}

/* fork() while another thread is inside the library: the child gets a copy
 * of every lock the library keeps for the whole process, as it was at that
 * instant, and no thread to give it back. One thread takes and gives back a
 * flock over and over (each time listing and unlisting its handle for the
 * exit hook); the main thread forks, and each child closes another handle
 * and exits, under a deadline. Without fork handlers about one child in a
 * hundred found the list of held handles locked, and hung in lock_close. */
#define FORKS_WHILE_CHURNING 1500

struct churn {
    lock_handle *h;
    int stop;       /* atomic: set by the main thread */
    int cycles;     /* atomic: acquire/release cycles done */
    int failure;    /* the first result that was not LOCK_OK */
};

static void *acquire_release_until_stopped(void *arg) {
    struct churn *churn = arg;
    while (!__atomic_load_n(&churn->stop, __ATOMIC_SEQ_CST)) {
        lock_result rc = lock_try_acquire(churn->h, NULL);
        if (rc == LOCK_OK) rc = lock_release(churn->h, 0);
        if (rc != LOCK_OK) {
            churn->failure = (int)rc;
            return NULL;
        }
        __atomic_add_fetch(&churn->cycles, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static bool close_in_child(void *h) {
    CLOSE(h);
    return true;
}

static bool test_fork_while_another_thread_calls(void) {
    if (getenv("LOCKFFI_UNDER_MEMCHECK") != NULL) {
        SKIP("under memcheck: a child of fork() cannot free the other thread's thread-locals, which memcheck counts "
             "as definitely lost");
    }
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "fork-churn"));
    SCHEME(flock_scheme, "flock");
    SCHEME(mkdir_scheme, "mkdir");
    lock_handle *churned = NULL, *closed = NULL;
    OPEN(churned, flock_scheme, dir, NULL);
    OPEN(closed, mkdir_scheme, dir, NULL);
    struct churn churn = {churned, 0, 0, LOCK_OK};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, acquire_release_until_stopped, &churn) == 0);
    bool children_ok = true;
    int forked = 0;
    while (children_ok && forked < FORKS_WHILE_CHURNING) {
        children_ok = in_child_with_deadline(close_in_child, closed, 10);
        forked++;
    }
    __atomic_store_n(&churn.stop, 1, __ATOMIC_SEQ_CST);
    CHECK(pthread_join(thread, NULL) == 0);
    CLOSE(churned);
    CLOSE(closed);
    CHECK_MSG(children_ok, "child %d of %d failed", forked, FORKS_WHILE_CHURNING);
    CHECK_RC((lock_result)churn.failure, LOCK_OK);
    CHECK_MSG(churn.cycles > 0, "the other thread never acquired while the children were forked");
    return true;
}

/* A child that acquires, reports its fence, and waits to be killed. */
static bool child_holds(const struct strategy *s, const char *dir, const char *options, int report_fd, int wait_fd) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, options);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK(write_exact(report_fd, &fence, sizeof fence));
    child_idle(wait_fd); /* killed here; exits if the parent goes away */
    return true;
}

/* While the holder lives, it is seen alive and its lock is busy. */
static bool holder_seen_alive(lock_handle *h, pid_t holder) {
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_BUSY);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale && info.owner_pid == (int32_t)holder && info.owner_liveness == LOCK_OWNER_ALIVE,
              "a live holder: held %d, stale %d, pid %d (child %ld), liveness %d", (int)info.held, (int)info.stale,
              (int)info.owner_pid, (long)holder, (int)info.owner_liveness);
    return true;
}

/* A holder killed by SIGKILL: with stale=pid (the default) and ttl=1h its
 * lock is taken at once; with stale=none it stays (but for flock, whose
 * kernel lock dies with its holder), which shows that dead-owner detection
 * is what frees it. */
static bool killed_holder(const struct strategy *s, const char *dir) {
    for (int round = 0; round < 2; round++) {
        const char *options = round == 0 ? "ttl=1h&stale=none" : "ttl=1h";
        int report[2], idle[2];
        CHECK(pipe(report) == 0 && pipe(idle) == 0);
        pid_t pid = fork_child();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(report[0]);
            close(idle[1]);
            child_exit(child_holds(s, dir, options, report[1], idle[0]));
        }
        close(report[1]);
        close(idle[0]);
        uint64_t child_fence = 0;
        bool reported = read_exact(report[0], &child_fence, sizeof child_fence);
        close(report[0]);
        lock_handle *h = NULL;
        bool alive_ok = false;
        lock_result opened = open_lock(s, dir, options, &h);
        if (reported && opened == LOCK_OK) alive_ok = holder_seen_alive(h, pid);
        kill(pid, SIGKILL);
        int status = wait_child(pid);
        close(idle[1]);
        CHECK_MSG(reported, "the child did not acquire");
        CHECK_RC(opened, LOCK_OK);
        if (!alive_ok) return false;
        CHECK_MSG(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was not killed");

        lock_info info;
        CHECK_RC(lock_inspect(h, &info), LOCK_OK);
        uint64_t fence = FENCE_SENTINEL;
        if (s->ttl_is_advisory) {
            CHECK_MSG(!info.held, "a killed process still holds a flock");
        } else {
            CHECK_MSG(info.held && info.owner_pid == (int32_t)pid && info.owner_liveness == LOCK_OWNER_DEAD,
                      "a killed holder: held %d, pid %d, liveness %d", (int)info.held, (int)info.owner_pid,
                      (int)info.owner_liveness);
            CHECK_MSG(info.stale == (round == 1), "stale is %d with %s", (int)info.stale, options);
        }
        if (round == 0 && !s->ttl_is_advisory) {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_BUSY); /* stale=none: waits for the TTL */
            bool was_held = false;
            CHECK_RC(lock_break(h, &was_held), LOCK_OK);
            CHECK(was_held);
        } else {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK); /* at once: one attempt */
            CHECK_MSG(fence > child_fence, "fence %" PRIu64 " after the dead holder's %" PRIu64, fence, child_fence);
            /* the acquisition says whose lock it took over, and that it died */
            lock_info previous;
            CHECK_RC(lock_took_over(h, &previous), LOCK_OK);
            CHECK_MSG(previous.held && previous.stale && previous.owner_pid == (int32_t)pid &&
                          previous.owner_liveness == LOCK_OWNER_DEAD && previous.fence == child_fence,
                      "took over from: held %d, stale %d, pid %d (child %ld), liveness %d, fence %" PRIu64
                      " (child's %" PRIu64 ")",
                      (int)previous.held, (int)previous.stale, (int)previous.owner_pid, (long)pid,
                      (int)previous.owner_liveness, previous.fence, child_fence);
            CHECK_RC(lock_release(h, 0), LOCK_OK);
            CHECK_RC(lock_took_over(h, &previous), LOCK_ERR_NOT_HELD);
        }
        CLOSE(h);
    }
    return no_litter(s, dir);
}

static bool test_killed_holder(void) {
    return for_each_strategy(killed_holder);
}

/* ------------------------------------------------------------------------ */
/* A thread with a small stack                                              */
/* ------------------------------------------------------------------------ */

/* A handle is tens of KiB (nothing in it is allocated but the handle
 * itself): it is made in place on the heap, never passed by value, so that
 * no call needs more than LOCKFFI_TEST_STACK_KIB of its thread's stack,
 * what the README promises (build.rs sets it by how the library was
 * built). Each kind of call is made on such a thread: open, acquire,
 * inspect, prolong, a renewing watchdog, commit, release, a wait in line
 * that times out, close. */
struct small_stack_run {
    const struct strategy *s;
    const char *dir;
    bool ok;
};

static bool calls_on_this_thread(const struct small_stack_run *run) {
    const struct strategy *s = run->s;
    lock_handle *h = NULL, *waiter = NULL;
    OPEN(h, s, run->dir, "ttl=30s");
    CHECK_RC(lock_acquire(h, 1000, NULL), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held, "not held after lock_acquire");
    CHECK_RC(lock_prolong(h, 60000), LOCK_OK);
    if (!s->ttl_is_advisory) {
        CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK);
        CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
    }
    char temp[HARNESS_PATH_MAX], target[HARNESS_PATH_MAX];
    path_join(temp, sizeof temp, run->dir, "committed.new");
    path_join(target, sizeof target, run->dir, "committed");
    CHECK(write_text(temp, "new\n"));
    CHECK_RC(lock_commit(h, temp, target), LOCK_OK);
    OPEN(waiter, s, run->dir, "ttl=30s");
    CHECK_RC(lock_acquire(waiter, 50, NULL), LOCK_TIMEOUT);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_OK);
    CLOSE(waiter);
    CLOSE(h);
    return true;
}

static void *small_stack_thread(void *arg) {
    struct small_stack_run *run = arg;
    run->ok = calls_on_this_thread(run);
    return NULL;
}

/* In a child, so that a stack overflow (SIGSEGV) fails the case, not the
 * program. */
static bool on_a_small_stack(void *arg) {
    pthread_attr_t attr;
    pthread_t thread;
    CHECK(pthread_attr_init(&attr) == 0);
    CHECK(pthread_attr_setstacksize(&attr, (size_t)LOCKFFI_TEST_STACK_KIB * 1024) == 0);
    CHECK(pthread_create(&thread, &attr, small_stack_thread, arg) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    pthread_attr_destroy(&attr);
    return ((struct small_stack_run *)arg)->ok;
}

static bool small_stack(const struct strategy *s, const char *dir) {
    struct small_stack_run run = {s, dir, false};
    return in_child_with_deadline(on_a_small_stack, &run, 30);
}

static bool test_calls_fit_a_small_thread_stack(void) {
    return for_each_strategy(small_stack);
}

static const struct test_case CASES[] = {
    {"test_version", test_version},
    {"test_open_acquire_release_close", test_open_acquire_release_close},
    {"test_fences_strictly_increase", test_fences_strictly_increase},
    {"test_acquire_with_timeout", test_acquire_with_timeout},
    {"test_prolong", test_prolong},
    {"test_release_ok_and_expired", test_release_ok_and_expired},
    {"test_lost", test_lost},
    {"test_inspect_and_cooldown", test_inspect_and_cooldown},
    {"test_break", test_break},
    {"test_warning_callback", test_warning_callback},
    {"test_warning_names_holder", test_warning_names_holder},
    {"test_cancel_callback", test_cancel_callback},
    {"test_lock_path", test_lock_path},
    {"test_lockfile_names_mode_and_stamp", test_lockfile_names_mode_and_stamp},
    {"test_foreign_locks", test_foreign_locks},
    {"test_data_file_kept", test_data_file_kept},
    {"test_fork_child_cannot_release", test_fork_child_cannot_release},
    {"test_fork_child_acquires_its_own", test_fork_child_acquires_its_own},
    {"test_autoclean_at_exit", test_autoclean_at_exit},
    {"test_release_in_atexit_handler", test_release_in_atexit_handler},
    {"test_close_while_lost_callback_releases", test_close_while_lost_callback_releases},
    {"test_exit_while_lost_callback_releases", test_exit_while_lost_callback_releases},
    {"test_lost_callback_stops_own_watchdog", test_lost_callback_stops_own_watchdog},
    {"test_lost_callback_closes_own_handle", test_lost_callback_closes_own_handle},
    {"test_close_waits_for_a_lost_callback_in_a_call", test_close_waits_for_a_lost_callback_in_a_call},
    {"test_a_thread_cancelled_in_a_wait_ends_after_it", test_a_thread_cancelled_in_a_wait_ends_after_it},
    {"test_close_from_a_warning_of_its_own_wait", test_close_from_a_warning_of_its_own_wait},
    {"test_fork_child_closes_renewed_handle", test_fork_child_closes_renewed_handle},
    {"test_fork_while_another_thread_calls", test_fork_while_another_thread_calls},
    {"test_killed_holder", test_killed_holder},
    {"test_calls_fit_a_small_thread_stack", test_calls_fit_a_small_thread_stack},
};

int main(int argc, char **argv) {
    return run_tests("api", CASES, sizeof CASES / sizeof CASES[0], argc > 1 ? argv[1] : NULL);
}
