/*
 * errors.c: every error path of the C API, each with its distinct code, and
 * outputs left untouched on failure.
 *
 * Usage: c_errors [name-filter]
 *
 * Permission checks are bypassed for root: run as root, the permission case
 * forks a child that drops to uid/gid 65534 (nobody) before it tries.
 */
/* F_OFD_SETLKW, the lock the library takes on a guard, a lease or a queue. */
#define _GNU_SOURCE 1

#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "harness.h"

#define FENCE_SENTINEL UINT64_C(0x5EA15EA15EA15EA1)

/* Where a failed lock_open must leave *handle_out. */
static char sentinel_byte;
#define SENTINEL_HANDLE ((lock_handle *)(void *)&sentinel_byte)

/* lock_open(spec) must fail with `expected`, leave the handle output alone,
 * and leave a message that contains `needle` (if not NULL). */
static bool open_fails(const char *spec, lock_result expected, const char *needle) {
    lock_handle *h = SENTINEL_HANDLE;
    lock_result rc = lock_open(spec, &h);
    char message[512];
    size_t len = lock_last_error_message(message, sizeof message);
    CHECK_MSG(rc == expected, "lock_open(\"%.80s\") returned %d %s (\"%s\"), expected %s", spec, (int)rc, rc_name(rc),
              message, rc_name(expected));
    CHECK_MSG(h == SENTINEL_HANDLE, "lock_open(\"%.80s\") wrote *handle_out on failure", spec);
    CHECK_MSG(len > 0 && len == strlen(message), "lock_open(\"%.80s\") left message \"%s\" (length %zu)", spec,
              message, len);
    CHECK_MSG(needle == NULL || strstr(message, needle) != NULL,
              "the message for \"%.80s\" is \"%s\", which does not name \"%s\"", spec, message, needle);
    return true;
}

static bool test_spec_syntax(void) {
    const char *specs[] = {
        "no-colon-here", "", ":/tmp/x", "lockfile:", "lockfile:?ttl=1s", "lockfile:/tmp/a%zz", "lockfile:/tmp/a%2",
        "lockfile:/tmp/a%00b", "lockfile:/tmp/x?ttl", "lockfile:/tmp/x?ttl=1s&&nfs=1", "mkdir:/tmp/x?", "flock:",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        if (!open_fails(specs[i], LOCK_ERR_SPEC_SYNTAX, "lock spec")) return false;
    }
    return true;
}

static bool test_spec_unknown_scheme(void) {
    return open_fails("redis2:/tmp/x", LOCK_ERR_SPEC_UNKNOWN_SCHEME, "redis2") &&
           open_fails("LOCKFILE:/tmp/x", LOCK_ERR_SPEC_UNKNOWN_SCHEME, "LOCKFILE") &&
           open_fails("file:/tmp/x?ttl=1s", LOCK_ERR_SPEC_UNKNOWN_SCHEME, "file");
}

static bool test_spec_unknown_key(void) {
    return open_fails("lockfile:/tmp/x?colour=red", LOCK_ERR_SPEC_UNKNOWN_KEY, "colour") &&
           open_fails("lockfile:/tmp/x?TTL=1s", LOCK_ERR_SPEC_UNKNOWN_KEY, "TTL") &&
           open_fails("mkdir:/tmp/x?nfs=1", LOCK_ERR_SPEC_UNKNOWN_KEY, "nfs") &&
           open_fails("mkdir:/tmp/x?format=%25f.l", LOCK_ERR_SPEC_UNKNOWN_KEY, "format") &&
           open_fails("flock:/tmp/x?ext=.l", LOCK_ERR_SPEC_UNKNOWN_KEY, "ext") &&
           open_fails("flock:/tmp/x?ttl=1s&max=5", LOCK_ERR_SPEC_UNKNOWN_KEY, "max") &&
           /* signal= is lease's alone (mode= is every scheme's: who may take the lock) */
           open_fails("symlink:/tmp/x?signal=TERM", LOCK_ERR_SPEC_UNKNOWN_KEY, "signal") &&
           open_fails("toplock:/tmp/x?signal=KILL", LOCK_ERR_SPEC_UNKNOWN_KEY, "signal") &&
           open_fails("lockfile:/tmp/x?signal=TERM", LOCK_ERR_SPEC_UNKNOWN_KEY, "signal") &&
           open_fails("lease:/tmp/x?nfs=1", LOCK_ERR_SPEC_UNKNOWN_KEY, "nfs") &&
           open_fails("toplock:/tmp/x?ext=.q", LOCK_ERR_SPEC_UNKNOWN_KEY, "ext");
}

static bool test_spec_bad_value(void) {
    static const struct {
        const char *spec, *key;
    } cases[] = {
        {"lockfile:/tmp/x?ttl=soon", "ttl"},    {"lockfile:/tmp/x?ttl=1.5s", "ttl"},
        {"lockfile:/tmp/x?ttl=-1s", "ttl"},     {"mkdir:/tmp/x?hold=200y", "hold"},
        {"lockfile:/tmp/x?mode=999", "mode"},   {"flock:/tmp/x?mode=rw", "mode"},
        {"lockfile:/tmp/x?nfs=maybe", "nfs"},   {"mkdir:/tmp/x?stale=maybe", "stale"},
        {"flock:/tmp/x?warn=2", "warn"},        {"lockfile:/tmp/x?wafter=0", "wafter"},
        {"mkdir:/tmp/x?wmin=later", "wmin"},    {"lockfile:/tmp/x?format=%25q", "format"},
        {"lockfile:/tmp/x?ext=a%2Fb", "ext"},   {"lockfile:/tmp/x?format=%25f.l&ext=.l", "ext"},
        {"lockfile:/tmp/x?ttl=1%zzs", "ttl"},   {"lease:/tmp/x?signal=HUP", "signal"},
        {"lease:/tmp/x?signal=term", "signal"}, {"symlink:/tmp/x?ttl=forever", "ttl"},
        {"toplock:/tmp/x?stale=maybe", "stale"},
        /* mode: permission bits only; the owner reads and writes, and each
         * other class too, or neither (a reader could hold a guard locked) */
        {"mkdir:/tmp/x?mode=0400", "mode"},     {"symlink:/tmp/x?mode=1777", "mode"},
        {"lease:/tmp/x?mode=2660", "mode"},     {"toplock:/tmp/x?mode=0200", "mode"},
        {"flock:/tmp/x?mode=0644", "mode"},     {"lockfile:/tmp/x?mode=0640", "mode"},
        {"mkdir:/tmp/x?mode=0700", "mode"},
        /* a signal on the word of a lease file others may write: never */
        {"lease:/tmp/x?signal=TERM&mode=0660", "signal"},
        /* the lock file is never the protected file itself, and one lock
         * file per process (%p) excludes nobody */
        {"lockfile:/tmp/x?ext=", "ext"},        {"lockfile:/tmp/x?format=%25f.%25p", "format"},
        {"lockfile:/tmp/x?format=%25f", "format"}, {"lockfile:/tmp/x?format=%25D/%25F", "format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!open_fails(cases[i].spec, LOCK_ERR_SPEC_BAD_VALUE, cases[i].key)) return false;
    }
    /* the owner alone, its group, everyone: accepted by every scheme, but
     * for a private-only one the modes that let others write */
    const struct {
        const char *text;
        bool others_may_write;
    } modes[] = {{"0600", false}, {"600", false}, {"0660", true}, {"0666", true}, {"0606", true}};
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            char spec[128];
            format_into(spec, sizeof spec, "%s:/tmp/x?mode=%s", STRATEGIES[i].name, modes[m].text);
            if (private_only(&STRATEGIES[i]) && modes[m].others_may_write) {
                if (!open_fails(spec, LOCK_ERR_SPEC_BAD_VALUE, "mode")) return false;
                continue;
            }
            lock_handle *h = NULL;
            CHECK_RC(lock_open(spec, &h), LOCK_OK);
            CLOSE(h);
        }
    }
    return true;
}

static bool test_spec_duplicate_key(void) {
    return open_fails("lockfile:/tmp/x?ttl=1s&hold=2s", LOCK_ERR_SPEC_DUPLICATE_KEY, "hold") &&
           open_fails("mkdir:/tmp/x?ttl=1s&ttl=1s", LOCK_ERR_SPEC_DUPLICATE_KEY, "ttl") &&
           open_fails("lockfile:/tmp/x?nfs=1&mode=0660&nfs=0", LOCK_ERR_SPEC_DUPLICATE_KEY, "nfs");
}

/* A target longer than PATH_MAX, one whose derived paths (the lock file
 * <target>.lock, the guard <lock>.guard) are, and a path component longer
 * than NAME_MAX. */
static bool test_path_too_long(void) {
    static char spec[6000];
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        int n = snprintf(spec, sizeof spec, "%s:/", STRATEGIES[i].name);
        memset(spec + n, 'a', 5000);
        spec[n + 5000] = '\0';
        if (!open_fails(spec, LOCK_ERR_PATH_TOO_LONG, NULL)) return false;
    }
    /* 4090 bytes fit; with ".lock" (lockfile) or ".guard" (every scheme that
     * keeps a guard) they do not. A scheme whose target is its lock and that
     * keeps no guard (lease, toplock) derives no path: lock_open takes it
     * and the missing directories are found when the lock is used. */
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        const struct strategy *s = &STRATEGIES[i];
        harness_context = s->name;
        bool derives = strcmp(s->lock_name, s->target) != 0 || s->guard_name != NULL;
        int n = snprintf(spec, sizeof spec, "%s:", s->name);
        for (int j = 0; j < 4090; j++) spec[n + j] = (j % 200 == 0) ? '/' : 'a';
        spec[n + 4090] = '\0';
        if (derives) {
            if (!open_fails(spec, LOCK_ERR_PATH_TOO_LONG, NULL)) return false;
        } else {
            lock_handle *h = NULL;
            CHECK_RC(lock_open(spec, &h), LOCK_OK);
            CHECK_RC(lock_try_acquire(h, NULL), LOCK_ERR_NOT_FOUND);
            char message[512];
            last_error(message, sizeof message);
            CHECK_MSG(strncmp(message, "lock_try_acquire: /a", 20) == 0, "the message \"%.60s...\" does not start "
                      "with the call and the lock's path", message);
            CLOSE(h);
        }
    }
    harness_context = NULL;
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "long-name"));
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        harness_context = STRATEGIES[i].name;
        char name[400];
        memset(name, 'n', 300);
        name[300] = '\0';
        format_into(spec, sizeof spec, "%s:%s/%s", STRATEGIES[i].name, dir, name);
        lock_handle *h = NULL;
        CHECK_RC(lock_open(spec, &h), LOCK_OK);
        uint64_t fence = FENCE_SENTINEL;
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_PATH_TOO_LONG);
        CHECK(fence == FENCE_SENTINEL);
        CLOSE(h);
    }
    return true;
}

/* A directory on the path is missing: LOCK_ERR_NOT_FOUND, at once (not a
 * wait), and nothing created. A path through a regular file:
 * LOCK_ERR_NOT_A_DIRECTORY. Either message names the call and the path. */
static bool missing_directory(const struct strategy *s, const char *dir) {
    char missing[HARNESS_PATH_MAX], file[HARNESS_PATH_MAX], spec[HARNESS_PATH_MAX * 2];
    path_join(missing, sizeof missing, dir, "missing/deeper");
    lock_handle *h = NULL;
    CHECK_RC(open_lock(s, missing, NULL, &h), LOCK_OK); /* lock_open touches no file */
    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_NOT_FOUND);
    char message[1024], prefix[HARNESS_PATH_MAX + 64];
    last_error(message, sizeof message);
    format_into(prefix, sizeof prefix, "lock_try_acquire: %s", missing);
    CHECK_MSG(strncmp(message, prefix, strlen(prefix)) == 0 && strstr(message, "does not exist") != NULL,
              "the message \"%s\" does not name the call, the path under %s and the cause", message, missing);
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(h, 5000, &fence), LOCK_ERR_NOT_FOUND);
    CHECK_MSG(mono_ms() - start < 2500, "lock_acquire waited on LOCK_ERR_NOT_FOUND");
    CHECK_RC(lock_acquire(h, LOCK_WAIT_FOREVER, &fence), LOCK_ERR_NOT_FOUND);
    CHECK(fence == FENCE_SENTINEL);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    CLOSE(h);
    path_join(missing, sizeof missing, dir, "missing");
    CHECK_MSG(!path_exists(missing), "%s was created", missing);

    /* a regular file where a directory belongs (ENOTDIR) */
    path_join(file, sizeof file, dir, "plain-file");
    CHECK(write_text(file, "data\n"));
    format_into(spec, sizeof spec, "%s:%s/%s", s->name, file, s->target);
    CHECK_RC(lock_open(spec, &h), LOCK_OK);
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_NOT_A_DIRECTORY);
    CHECK(fence == FENCE_SENTINEL);
    last_error(message, sizeof message);
    format_into(prefix, sizeof prefix, "lock_try_acquire: %s/", file);
    CHECK_MSG(strncmp(message, prefix, strlen(prefix)) == 0 && strstr(message, "errno 20") != NULL,
              "the message \"%s\" does not name the call, the path under %s and ENOTDIR", message, file);
    CHECK_RC(lock_inspect(h, NULL), LOCK_ERR_NULL_ARGUMENT);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_NOT_A_DIRECTORY);
    CLOSE(h);
    char content[16];
    CHECK_MSG(read_file(file, content, sizeof content) == 5 && strcmp(content, "data\n") == 0,
              "the file on the path was changed");
    return true;
}

static bool test_missing_directory(void) {
    return for_each_strategy(missing_directory);
}

/* In a child without privileges: a lock in a directory it may write is
 * taken (the control: every scheme works for a user who is not root), one
 * in a 0500 directory is LOCK_ERR_PERMISSION. */
static bool permission_checks(const char *writable, const char *readonly) {
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        const struct strategy *s = &STRATEGIES[i];
        harness_context = s->name;
        char own[HARNESS_PATH_MAX]; /* each scheme in a directory of its own */
        path_join(own, sizeof own, writable, s->name);
        CHECK(mkdir(own, 0700) == 0);
        lock_handle *h = NULL;
        OPEN(h, s, own, NULL);
        CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        CLOSE(h);

        OPEN(h, s, readonly, NULL);
        uint64_t fence = FENCE_SENTINEL;
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_PERMISSION);
        char message[512];
        last_error(message, sizeof message);
        CHECK_MSG(strstr(message, "permission") != NULL, "the message \"%s\" does not say permission", message);
        CHECK_RC(lock_acquire(h, 5000, &fence), LOCK_ERR_PERMISSION);
        CHECK(fence == FENCE_SENTINEL);
        CLOSE(h);
    }
    harness_context = NULL;
    DIR *d = opendir(readonly);
    CHECK(d != NULL);
    struct dirent *entry;
    int entries = 0;
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) entries++;
    }
    closedir(d);
    CHECK_MSG(entries == 0, "%d entries were created in the read-only directory", entries);
    return true;
}

#define NOBODY 65534
#define EXIT_CANNOT_DROP 77
#define EXIT_UNREACHABLE 78

static bool test_permission_denied(void) {
    char dir[HARNESS_PATH_MAX], writable[HARNESS_PATH_MAX], readonly[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "permission"));
    path_join(writable, sizeof writable, dir, "writable");
    path_join(readonly, sizeof readonly, dir, "readonly");
    CHECK(mkdir(writable, 0700) == 0);
    CHECK(mkdir(readonly, 0700) == 0);
    bool root = geteuid() == 0;
    if (root) {
        /* the unprivileged child owns both; the 0500 mode alone refuses it */
        CHECK(chown(writable, NOBODY, NOBODY) == 0);
        CHECK(chown(readonly, NOBODY, NOBODY) == 0);
    }
    CHECK(chmod(readonly, 0500) == 0);
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (root) {
#if defined(_DEFAULT_SOURCE) || defined(_BSD_SOURCE) || defined(__APPLE__)
            gid_t none[1] = {NOBODY};
            if (setgroups(1, none) != 0) _exit(EXIT_CANNOT_DROP);
#endif
            if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0) _exit(EXIT_CANNOT_DROP);
            if (geteuid() == 0 || setuid(0) == 0) _exit(EXIT_CANNOT_DROP);
        }
        if (access(writable, W_OK | X_OK) != 0) _exit(EXIT_UNREACHABLE);
        child_exit(permission_checks(writable, readonly));
    }
    int status = wait_child(pid);
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == EXIT_CANNOT_DROP) {
        SKIP("running as root, and the child could not drop privileges to uid/gid %d", NOBODY);
    }
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == EXIT_UNREACHABLE) {
        SKIP("uid %d cannot reach %.200s (set TMPDIR to a world-searchable directory)", NOBODY, writable);
    }
    char text[64];
    CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the %s child %s (its failure is printed above)", root ? "unprivileged" : "",
              describe_status(status, text, sizeof text));
    return true;
}

/* Someone else holds it: LOCK_BUSY, and fence_out untouched. */
static bool busy(const struct strategy *s, const char *dir) {
    lock_handle *a = NULL, *b = NULL;
    OPEN(a, s, dir, NULL);
    OPEN(b, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(a, &fence), LOCK_OK);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(b, &probe), LOCK_BUSY);
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written on LOCK_BUSY");
    CHECK_MSG(lock_last_error_message(NULL, 0) > 0, "no message after LOCK_BUSY");
    CHECK_RC(lock_acquire(b, 0, &probe), LOCK_TIMEOUT);
    CHECK_RC(lock_acquire(b, 50, &probe), LOCK_TIMEOUT);
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written on LOCK_TIMEOUT");
    CHECK_RC(lock_release(b, 0), LOCK_ERR_NOT_HELD); /* the loser holds nothing */
    CHECK_RC(lock_release(a, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    return true;
}

static bool test_busy(void) {
    return for_each_strategy(busy);
}

static bool release_twice(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, NULL);
    OPEN(other, s, dir, NULL);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD); /* never acquired */
    lock_info previous, untouched;
    memset(&previous, 0x5A, sizeof previous);
    untouched = previous;
    CHECK_RC(lock_took_over(h, &previous), LOCK_ERR_NOT_HELD);
    CHECK_MSG(memcmp(&previous, &untouched, sizeof previous) == 0, "previous_out written on LOCK_ERR_NOT_HELD");
    char message[512];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(strstr(message, "lock_took_over") != NULL && strstr(message, s->lock_name) != NULL,
              "the NOT_HELD message \"%s\" names neither the call nor the lock %s", message, s->lock_name);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_took_over(h, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_took_over(h, &previous), LOCK_OK);
    CHECK_MSG(!previous.held && previous.owner_pid == 0 && previous.fence == 0,
              "a free lock was taken over from nobody: held %d, pid %d", (int)previous.held, (int)previous.owner_pid);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_took_over(h, &previous), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_release(h, 1000), LOCK_ERR_NOT_HELD);
    /* the failed releases changed nothing: no cooldown, and another holder
     * is not disturbed by them */
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle, "a NOT_HELD release disturbed another holder");
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool test_release_twice(void) {
    return for_each_strategy(release_twice);
}

/* After a release that did not happen: three TTLs later (unrenewed, the
 * lock would have run out by then) `other` still sees the lock held, fresh,
 * with the fence `h` acquired, and cannot take it; then `h` releases, and
 * both handles are closed. */
static bool still_renewed_then_closed(lock_handle *h, lock_handle *other, uint64_t fence, const char *what) {
    sleep_ms(900);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.stale && info.fence == fence,
              "three TTLs after the %s release: held %d, stale %d, fence %" PRIu64 " (acquired %" PRIu64 ")", what,
              (int)info.held, (int)info.stale, info.fence, fence);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* A refused call changes nothing: a release refused for its cooldown
 * (beyond 100 years) leaves the lock held and still renewed by its watchdog.
 * mkdir stands for the strategies (the watchdog is the library's, not the
 * strategy's); flock has no TTL to renew. */
static bool test_refused_release_keeps_renewal(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "refused-release"));
    SCHEME(s, "mkdir");
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, UINT64_MAX), LOCK_ERR_INVALID_ARGUMENT);
    /* the message names the lock, the argument and the limit */
    char message[1024], lock_path_buf[HARNESS_PATH_MAX];
    lock_last_error_message(message, sizeof message);
    CHECK_RC(lock_path(h, lock_path_buf, sizeof lock_path_buf, NULL), LOCK_OK);
    CHECK_MSG(strstr(message, lock_path_buf) != NULL && strstr(message, "cooldown_ms") != NULL &&
                  strstr(message, "100 years") != NULL,
              "the refusal says \"%s\"", message);
    return still_renewed_then_closed(h, other, fence, "refused");
}

/* Takes (F_WRLCK) or drops (F_UNLCK) an open-file-description lock on the
 * whole of `fd`: the lock the library takes on a guard, a lease or a queue
 * file while it reads and changes it. Polled, as the library does, rather
 * than waited for with F_OFD_SETLKW, which memcheck does not know may block:
 * it would keep every other thread (a watchdog holding the lock) from
 * running. The library holds it for a few system calls at a time. */
static bool ofd_lock(int fd, short type) {
    struct flock range;
    memset(&range, 0, sizeof range);
    range.l_type = type;
    range.l_whence = SEEK_SET;
    while (fcntl(fd, F_OFD_SETLK, &range) != 0) {
        if (errno != EINTR && errno != EAGAIN && errno != EACCES) return false;
        sleep_ms(1);
    }
    return true;
}

/* Overwrites the byte at `offset` of `path` under the lock the library
 * takes, and returns in `*old` the byte that was there. */
static bool replace_byte(const char *path, off_t offset, char byte, char *old) {
    int fd = open(path, O_RDWR);
    CHECK_MSG(fd >= 0, "open(%s): %s", path, strerror(errno));
    bool ok = ofd_lock(fd, F_WRLCK) && (old == NULL || pread(fd, old, 1, offset) == 1) &&
              pwrite(fd, &byte, 1, offset) == 1;
    close(fd); /* drops the lock */
    CHECK_MSG(ok, "cannot rewrite byte %ld of %s: %s", (long)offset, path, strerror(errno));
    return true;
}

/* A guard line is `lockguard 2 <fence> ...`: byte 12 is the fence's first
 * digit. A letter there leaves the marker, so the guard is corrupt
 * (LOCK_ERR_CORRUPT_GUARD), not a file of someone else's. */
#define GUARD_FENCE_OFFSET 12

/* A release that fails with an error, not an outcome, leaves the lock held,
 * and renewed as before: here the guard file is damaged while the release
 * runs (LOCK_ERR_CORRUPT_GUARD), then mended. (LOCK_BUSY, a guard held by
 * others for the release's whole patience, takes the same path, and 2 s:
 * test_failed_release_on_close.) */
static bool test_failed_release_keeps_renewal(void) {
    char dir[HARNESS_PATH_MAX], guard[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "failed-release"));
    SCHEME(s, "mkdir");
    path_join(guard, sizeof guard, dir, s->guard_name);
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=300ms");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_OK);
    char first = 0;
    if (!replace_byte(guard, GUARD_FENCE_OFFSET, 'x', &first)) return false;
    lock_result released = lock_release(h, 0);
    if (!replace_byte(guard, GUARD_FENCE_OFFSET, first, NULL)) return false;
    CHECK_RC(released, LOCK_ERR_CORRUPT_GUARD);
    return still_renewed_then_closed(h, other, fence, "failed");
}

/* Whether what orders a scheme's changes is the section word in its file
 * (shm), not a lock of its file. */
static bool changes_under_a_section_word(const struct strategy *s) {
    return strcmp(s->name, "shm") == 0;
}

/* The bit of a shm section word's low half that says someone sleeps on it. */
#define SHM_SLEEPING ((uint64_t)1 << 31)

/* Runs in the child of shm_hold_section: takes the section word of the shm
 * lock file `path` in its own name (its pid, and a tag whose byte it holds
 * locked: the library waits for such a live holder until its deadline),
 * says so on `taken`, and lets it go as the library does once `let_go` is
 * closed. */
static bool shm_section_holder(const char *path, int taken, int let_go) {
    int fd = open(path, O_RDWR);
    CHECK_MSG(fd >= 0, "open(%s): %s", path, strerror(errno));
    uint64_t tag = (uint64_t)getpid() | ((uint64_t)1 << 31);
    struct flock byte = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)(LOCKCORE_SHM_TAG_BYTES_AT + tag),
                         .l_len = 1};
    CHECK_MSG(fcntl(fd, F_OFD_SETLK, &byte) == 0, "F_OFD_SETLK of the tag's byte: %s", strerror(errno));
    void *base = mmap(NULL, SHM_FILE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK_MSG(base != MAP_FAILED, "mmap(%s): %s", path, strerror(errno));
    uint64_t *word = (uint64_t *)(void *)((char *)base + LOCKCORE_SHM_SECTION_AT);
    uint64_t free_word = 0;
    CHECK_MSG(__atomic_compare_exchange_n(word, &free_word, (tag << 32) | (uint64_t)getpid(), false,
                                          __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST),
              "the section word of %s is held", path);
    CHECK(write(taken, "t", 1) == 1);
    char b;
    while (read(let_go, &b, 1) < 0 && errno == EINTR) {
    }
    if (__atomic_exchange_n(word, 0, __ATOMIC_SEQ_CST) & SHM_SLEEPING) {
        /* The low half, where the sleepers wait (little-endian). */
        syscall(SYS_futex, (uint32_t *)(void *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    munmap(base, SHM_FILE_LEN);
    close(fd);
    return true;
}

/* Holds the section word of the shm lock file `path` in a child process, as
 * a process in the middle of a change would, until the pipe `*let_go` is
 * closed; `*holder` is the child to wait for then. */
static bool shm_hold_section(const char *path, pid_t *holder, int *let_go) {
    int taken[2], release[2];
    CHECK(pipe(taken) == 0);
    CHECK(pipe(release) == 0);
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(taken[0]);
        close(release[1]);
        child_exit(shm_section_holder(path, taken[1], release[0]));
    }
    close(taken[1]);
    close(release[0]);
    char byte;
    bool held = read_exact(taken[0], &byte, 1);
    close(taken[0]);
    *holder = pid;
    *let_go = release[1];
    CHECK_MSG(held, "the child never took the section word of %s", path);
    return true;
}

/* lock_close of a held lock whose release fails answers that failure, with
 * its message, and frees the handle all the same; the lock stays as it was,
 * held by this live process, until an operator breaks it (flock's kernel
 * lock goes with the handle's descriptor). The release fails on a damaged
 * guard (LOCK_ERR_CORRUPT_GUARD); a scheme without a guard, on its lock
 * file kept locked by this case for the release's whole patience, or for
 * shm, which locks no file, the section word in its file held by a child process
 * (LOCK_BUSY, after 2 s). */
static bool failed_release_on_close(const struct strategy *s, const char *dir) {
    char state[HARNESS_PATH_MAX];
    path_join(state, sizeof state, dir, s->guard_name != NULL ? s->guard_name : s->lock_name);
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=1h");
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);

    lock_result expected = s->guard_name != NULL ? LOCK_ERR_CORRUPT_GUARD : LOCK_BUSY;
    char first = 0;
    int held_fd = -1, let_go = -1;
    pid_t word_holder = -1;
    if (s->guard_name != NULL) {
        if (!replace_byte(state, GUARD_FENCE_OFFSET, 'x', &first)) return false;
    } else if (changes_under_a_section_word(s)) {
        if (!shm_hold_section(state, &word_holder, &let_go)) return false;
    } else {
        held_fd = open(state, O_RDWR);
        CHECK_MSG(held_fd >= 0 && ofd_lock(held_fd, F_WRLCK), "cannot lock %s: %s", state, strerror(errno));
    }
    lock_result closed = lock_close(h); /* h is freed, whatever it answers */
    char message[1024];
    last_error(message, sizeof message);
    if (held_fd >= 0) close(held_fd);
    if (word_holder > 0) {
        close(let_go);
        CHECK_CHILD_OK(word_holder);
    }
    if (s->guard_name != NULL && !replace_byte(state, GUARD_FENCE_OFFSET, first, NULL)) return false;
    CHECK_MSG(closed == expected, "lock_close of a lock whose release fails returned %s (\"%s\"), expected %s",
              rc_name(closed), message, rc_name(expected));
    char prefix[HARNESS_PATH_MAX + 32];
    format_into(prefix, sizeof prefix, "lock_close: %s: ", state);
    CHECK_MSG(strncmp(message, prefix, strlen(prefix)) == 0, "the message \"%s\" does not start with \"%s\"",
              message, prefix);

    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    if (s->ttl_is_advisory) {
        CHECK_MSG(!info.held, "the kernel lock outlived the handle that held it");
    } else {
        CHECK_MSG(info.held && info.fence == fence && info.owner_pid == (int32_t)getpid() &&
                      info.owner_liveness == LOCK_OWNER_ALIVE && !info.stale,
                  "after the failed close: held %d, fence %" PRIu64 " (acquired %" PRIu64 "), pid %d, stale %d",
                  (int)info.held, info.fence, fence, (int)info.owner_pid, (int)info.stale);
        CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
        bool was_held = false;
        CHECK_RC(lock_break(other, &was_held), LOCK_OK);
        CHECK(was_held);
    }
    uint64_t next = 0;
    CHECK_RC(lock_try_acquire(other, &next), LOCK_OK);
    CHECK_MSG(next > fence, "fence %" PRIu64 " after %" PRIu64, next, fence);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(other);
    return true;
}

static bool test_failed_release_on_close(void) {
    return for_each_strategy(failed_release_on_close);
}

static bool prolong_after_release(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=10s");
    CHECK_RC(lock_prolong(h, 0), LOCK_ERR_NOT_HELD); /* never acquired */
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_prolong(h, 5000), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_prolong(h, 0), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_prolong(h, 5000), LOCK_ERR_NOT_HELD);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(!info.held, "a NOT_HELD prolong took the lock again");
    CLOSE(h);
    return true;
}

static bool test_prolong_after_release(void) {
    return for_each_strategy(prolong_after_release);
}

static bool acquire_twice(const struct strategy *s, const char *dir) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &probe), LOCK_ERR_ALREADY_HELD);
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(h, 5000, &probe), LOCK_ERR_ALREADY_HELD);
    CHECK_MSG(mono_ms() - start < 2500, "lock_acquire waited on its own lock");
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written on LOCK_ERR_ALREADY_HELD");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == fence, "ALREADY_HELD changed the held lock");
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_acquire_twice(void) {
    return for_each_strategy(acquire_twice);
}

static void never_called(void *context, uint64_t waited_ms) {
    (void)context;
    (void)waited_ms;
}

static bool test_null_arguments(void) {
    char dir[HARNESS_PATH_MAX], spec[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "null"));
    SCHEME(lockfile, "lockfile");
    make_spec(spec, sizeof spec, lockfile, dir, NULL);
    lock_handle *h = SENTINEL_HANDLE;
    CHECK_RC(lock_open(NULL, &h), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(h == SENTINEL_HANDLE, "handle_out written on LOCK_ERR_NULL_ARGUMENT");
    CHECK_RC(lock_open(spec, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_open(NULL, NULL), LOCK_ERR_NULL_ARGUMENT);

    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(NULL, &fence), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_try_acquire(NULL, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_acquire(NULL, 0, &fence), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_acquire(NULL, LOCK_WAIT_FOREVER, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on LOCK_ERR_NULL_ARGUMENT");
    CHECK_RC(lock_release(NULL, 0), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_prolong(NULL, 0), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_commit(NULL, "/nonexistent/temp", "/nonexistent/target"), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_commit(NULL, NULL, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_autorenew(NULL, NULL, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_autorenew_stop(NULL), LOCK_ERR_NULL_ARGUMENT);
    lock_info info, before;
    memset(&info, 0x5A, sizeof info);
    before = info;
    CHECK_RC(lock_inspect(NULL, &info), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(memcmp(&info, &before, sizeof info) == 0, "info_out written on LOCK_ERR_NULL_ARGUMENT");
    CHECK_RC(lock_took_over(NULL, &info), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(memcmp(&info, &before, sizeof info) == 0, "previous_out written on LOCK_ERR_NULL_ARGUMENT");
    bool was_held = true;
    CHECK_RC(lock_break(NULL, &was_held), LOCK_ERR_NULL_ARGUMENT);
    CHECK(was_held == true);
    CHECK_RC(lock_set_warning(NULL, never_called, NULL), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_set_warning(NULL, NULL, NULL), LOCK_ERR_NULL_ARGUMENT);
    char buf[HARNESS_PATH_MAX];
    size_t len = 4242;
    CHECK_RC(lock_path(NULL, buf, sizeof buf, &len), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(len == 4242, "len_out written on LOCK_ERR_NULL_ARGUMENT");

    /* the NULL message is the call, the argument, then the code's text;
     * asking for its length needs no buffer */
    char message[512], expected[512];
    size_t message_len = lock_last_error_message(message, sizeof message);
    format_into(expected, sizeof expected, "lock_path: handle: %s", lock_strerror(LOCK_ERR_NULL_ARGUMENT));
    CHECK_MSG(message_len > 0 && strcmp(message, expected) == 0,
              "after LOCK_ERR_NULL_ARGUMENT the message is \"%s\", expected \"%s\"", message, expected);
    CHECK(lock_last_error_message(NULL, 0) == message_len);
    CHECK(lock_last_error_message(NULL, 100) == message_len);
    /* a no-op that succeeds, and so, like every call that does, leaves no message */
    CHECK_RC(lock_close(NULL), LOCK_OK);
    CHECK_MSG(lock_last_error_message(NULL, 0) == 0, "a message is left after lock_close(NULL)");

    /* a live handle with a NULL required output */
    h = NULL;
    CHECK_RC(lock_open(spec, &h), LOCK_OK);
    CHECK(h != NULL && h != SENTINEL_HANDLE);
    CHECK_RC(lock_inspect(h, NULL), LOCK_ERR_NULL_ARGUMENT);
    /* lock_commit's paths are required, held lock or not (strategies.c
     * checks them while the lock is held) */
    CHECK_RC(lock_commit(h, NULL, "/nonexistent/target"), LOCK_ERR_NULL_ARGUMENT);
    CHECK_RC(lock_commit(h, "/nonexistent/temp", NULL), LOCK_ERR_NULL_ARGUMENT);
    len = 4242;
    CHECK_RC(lock_path(h, NULL, 100, &len), LOCK_ERR_NULL_ARGUMENT);
    CHECK_MSG(len == 4242, "len_out written on LOCK_ERR_NULL_ARGUMENT");
    /* optional outputs may be NULL */
    CHECK_RC(lock_break(h, NULL), LOCK_OK);
    CHECK_RC(lock_set_warning(h, NULL, NULL), LOCK_OK);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_path(h, buf, sizeof buf, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_acquire(h, 0, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_strerror(void) {
    for (size_t i = 0; i < ALL_CODES_COUNT; i++) {
        const char *text = lock_strerror((int32_t)ALL_CODES[i]);
        CHECK_MSG(text != NULL && text[0] != '\0', "lock_strerror(%s) is NULL or empty", rc_name(ALL_CODES[i]));
        CHECK_MSG(lock_strerror((int32_t)ALL_CODES[i]) == text, "lock_strerror(%s) is not static",
                  rc_name(ALL_CODES[i]));
        for (size_t j = 0; j < i; j++) {
            CHECK_MSG(strcmp(text, lock_strerror((int32_t)ALL_CODES[j])) != 0, "%s and %s share the text \"%s\"",
                      rc_name(ALL_CODES[i]), rc_name(ALL_CODES[j]), text);
        }
    }
    /* every number the library has a text for is in ALL_CODES: the list
     * here cannot fall behind the library's */
    const char *unknown_text = lock_strerror(-1);
    for (int32_t code = 0; code < 1000; code++) {
        bool listed = false;
        for (size_t j = 0; j < ALL_CODES_COUNT; j++) listed = listed || (int32_t)ALL_CODES[j] == code;
        bool known = strcmp(lock_strerror(code), unknown_text) != 0;
        CHECK_MSG(known == listed, "code %ld: the library %s a text for it, but ALL_CODES %s it", (long)code,
                  known ? "has" : "has no", listed ? "lists" : "does not list");
    }
    const int32_t unknown[] = {12345, -1, 6, 99, 108, 207, 311, 899, 901, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *text = lock_strerror(unknown[i]);
        CHECK_MSG(text != NULL && text[0] != '\0', "lock_strerror(%ld) is NULL or empty", (long)unknown[i]);
        for (size_t j = 0; j < ALL_CODES_COUNT; j++) {
            CHECK_MSG(strcmp(text, lock_strerror((int32_t)ALL_CODES[j])) != 0,
                      "the unknown code %ld has the text of %s", (long)unknown[i], rc_name(ALL_CODES[j]));
        }
    }
    return true;
}

static void *fail_in_thread(void *arg) {
    lock_handle *h = SENTINEL_HANDLE;
    *(lock_result *)arg = lock_open("lockfile:/tmp/x?colour=red", &h);
    return NULL;
}

/* lock_last_error_message: names the key of a spec error, truncates like
 * snprintf, is empty after a success, and belongs to its thread. */
static bool test_last_error_message(void) {
    lock_handle *h = SENTINEL_HANDLE;
    CHECK_RC(lock_open("lockfile:/tmp/x?ttl=soon", &h), LOCK_ERR_SPEC_BAD_VALUE);
    size_t len = lock_last_error_message(NULL, 0);
    char message[512];
    CHECK(lock_last_error_message(message, sizeof message) == len);
    CHECK_MSG(len > 0 && len == strlen(message), "length %zu for \"%s\"", len, message);
    CHECK_MSG(strstr(message, "ttl") != NULL, "\"%s\" does not name the key ttl", message);
    CHECK_MSG(strcmp(message, lock_strerror(LOCK_ERR_SPEC_BAD_VALUE)) != 0, "no detail beyond lock_strerror");
    /* reading it does not consume it */
    char again[512];
    CHECK(lock_last_error_message(again, sizeof again) == len && strcmp(again, message) == 0);
    /* cut to fit, NUL-terminated, full length returned */
    char small[8];
    memset(small, '#', sizeof small);
    CHECK(lock_last_error_message(small, sizeof small) == len);
    CHECK_MSG(small[7] == '\0' && strncmp(small, message, 7) == 0, "truncated to \"%.8s\"", small);
    small[0] = '#';
    CHECK(lock_last_error_message(small, 0) == len);
    CHECK_MSG(small[0] == '#', "a zero-length buffer was written");
    char one[1] = {'#'};
    CHECK(lock_last_error_message(one, 1) == len);
    CHECK(one[0] == '\0');

    /* another thread's failure does not change this thread's message */
    pthread_t thread;
    lock_result other = LOCK_OK;
    CHECK(pthread_create(&thread, NULL, fail_in_thread, &other) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK_MSG(other == LOCK_ERR_SPEC_UNKNOWN_KEY, "the thread got %s", rc_name(other));
    CHECK(lock_last_error_message(again, sizeof again) == len && strcmp(again, message) == 0);

    /* empty after a call that succeeded */
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "message"));
    h = NULL;
    SCHEME(flock_scheme, "flock");
    OPEN(h, flock_scheme, dir, NULL);
    CHECK_MSG(lock_last_error_message(NULL, 0) == 0, "a message remains after a successful lock_open");
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    CHECK(lock_last_error_message(NULL, 0) > 0);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_MSG(lock_last_error_message(message, sizeof message) == 0 && message[0] == '\0',
              "a message remains after a successful lock_try_acquire");
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

/* LOCK_ERR_HANDLE_IN_USE: while one thread is inside lock_acquire on a
 * handle (held there by its warning callback, which waits on a pipe), every
 * call on that handle from another thread is refused and changes nothing. */
struct in_use {
    int entered[2], proceed[2];
    int calls;
};

static void in_use_warning(void *context, uint64_t waited_ms) {
    struct in_use *state = context;
    (void)waited_ms;
    if (state->calls++ == 0) {
        char byte = 'x';
        if (write_exact(state->entered[1], &byte, 1)) read_exact(state->proceed[0], &byte, 1);
    }
}

struct acquirer {
    lock_handle *h;
    lock_result rc;
    uint64_t fence;
};

static void *acquire_in_thread(void *arg) {
    struct acquirer *a = arg;
    a->rc = lock_acquire(a->h, 30000, &a->fence);
    return NULL;
}

static bool test_handle_in_use(void) {
    char dir[HARNESS_PATH_MAX];
    CHECK(make_temp_dir(dir, sizeof dir, "in-use"));
    SCHEME(lockfile, "lockfile");
    lock_handle *holder = NULL, *h = NULL;
    OPEN(holder, lockfile, dir, NULL);
    OPEN(h, lockfile, dir, "wmin=10ms&wafter=10ms");
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    struct in_use state;
    memset(&state, 0, sizeof state);
    CHECK(pipe(state.entered) == 0 && pipe(state.proceed) == 0);
    CHECK_RC(lock_set_warning(h, in_use_warning, &state), LOCK_OK);

    struct acquirer acquirer = {h, LOCK_ERR_PANIC, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, acquire_in_thread, &acquirer) == 0);
    char byte;
    bool entered = read_exact(state.entered[0], &byte, 1);
    /* the thread is inside lock_acquire(h) now, blocked in the callback */
    uint64_t fence = FENCE_SENTINEL;
    lock_info info;
    memset(&info, 0x5A, sizeof info);
    lock_info untouched = info;
    char path[64];
    memset(path, '#', sizeof path);
    char temp[HARNESS_PATH_MAX], target[HARNESS_PATH_MAX];
    path_join(temp, sizeof temp, dir, "commit.tmp");
    path_join(target, sizeof target, dir, "commit.txt");
    CHECK(write_text(temp, "new\n"));
    bool was_held = true;
    lock_result results[11];
    results[0] = lock_try_acquire(h, &fence);
    results[1] = lock_acquire(h, 0, &fence);
    results[2] = lock_release(h, 0);
    results[3] = lock_prolong(h, 0);
    results[4] = lock_inspect(h, &info);
    results[5] = lock_path(h, path, sizeof path, NULL);
    results[6] = lock_set_warning(h, NULL, NULL);
    results[7] = lock_commit(h, temp, target);
    results[8] = lock_autorenew(h, NULL, NULL);
    results[9] = lock_autorenew_stop(h);
    results[10] = lock_break(h, &was_held);
    lock_result released = lock_release(holder, 0);
    write_exact(state.proceed[1], "x", 1);
    CHECK(pthread_join(thread, NULL) == 0);

    CHECK_MSG(entered, "the warning callback did not run");
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++) {
        CHECK_MSG(results[i] == LOCK_ERR_HANDLE_IN_USE, "call %zu on a handle in use returned %s", i,
                  rc_name(results[i]));
    }
    CHECK_MSG(fence == FENCE_SENTINEL && memcmp(&info, &untouched, sizeof info) == 0 && path[0] == '#' && was_held,
              "an output was written on LOCK_ERR_HANDLE_IN_USE");
    CHECK_MSG(path_exists(temp) && !path_exists(target), "a refused lock_commit renamed the file");
    CHECK_RC(released, LOCK_OK);
    CHECK_MSG(acquirer.rc == LOCK_OK, "the waiting thread got %s", rc_name(acquirer.rc));
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == acquirer.fence, "the refused calls disturbed the waiter");
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(h);
    close(state.entered[0]);
    close(state.entered[1]);
    close(state.proceed[0]);
    close(state.proceed[1]);
    return true;
}

/* A victim outside the lock's directory, to plant symlinks to. */
struct victim {
    char file[HARNESS_PATH_MAX], dir[HARNESS_PATH_MAX], absent[HARNESS_PATH_MAX];
    struct stat file_st;
};

static bool make_victim(struct victim *v, const char *lock_dir) {
    char base[HARNESS_PATH_MAX];
    format_into(base, sizeof base, "%s.victims", lock_dir);
    CHECK(mkdir(base, 0755) == 0);
    path_join(v->file, sizeof v->file, base, "precious.txt");
    path_join(v->dir, sizeof v->dir, base, "precious-dir");
    path_join(v->absent, sizeof v->absent, base, "absent");
    CHECK(write_file(v->file, "precious\n", 9, 0644));
    CHECK(mkdir(v->dir, 0755) == 0);
    char keep[HARNESS_PATH_MAX];
    path_join(keep, sizeof keep, v->dir, "keep");
    CHECK(write_text(keep, "keep\n"));
    CHECK(lstat(v->file, &v->file_st) == 0);
    return true;
}

/* The victims are as they were: content, mode, times; nothing new. */
static bool victim_untouched(const struct victim *v) {
    char content[64];
    struct stat st;
    CHECK_MSG(lstat(v->file, &st) == 0 && S_ISREG(st.st_mode), "the victim file is gone or replaced");
    CHECK_MSG(read_file(v->file, content, sizeof content) == 9 && strcmp(content, "precious\n") == 0,
              "the victim file was written through the symlink: \"%s\"", content);
    CHECK_MSG(st.st_mode == v->file_st.st_mode && st.st_size == v->file_st.st_size &&
                  st.st_mtim.tv_sec == v->file_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == v->file_st.st_mtim.tv_nsec,
              "the victim file's mode, size or mtime changed");
    CHECK_MSG(!path_exists(v->absent), "a file was created through a dangling symlink");
    DIR *d = opendir(v->dir);
    CHECK(d != NULL);
    struct dirent *entry;
    int entries = 0;
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) entries++;
    }
    closedir(d);
    CHECK_MSG(entries == 1, "the victim directory has %d entries instead of 1", entries);
    return true;
}

/* Sets a symlink's own mtime (never its target's) to now + `offset_s`. */
static bool set_link_mtime(const char *path, long offset_s) {
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec += offset_s;
    times[1] = times[0];
    CHECK_MSG(utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) == 0, "utimensat(%s): %s", path,
              strerror(errno));
    return true;
}

/* For the symlink strategy a symlink at the lock path is what a lock is, but
 * one without our record is another program's only if its target is a bare
 * name that names nothing (a shell's `ln -s $$`, IPC::Lock::WithTTL's link).
 * A link to a path, whatever is there, is no lock: LOCK_ERR_NOT_A_LOCK for
 * every call, however old its mtime, and the link and its target stay. */
static bool link_to_a_path_at_lock_path(const struct strategy *s, const char *dir, struct victim *v) {
    char lock[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, s->lock_name);
    const char *targets[] = {v->file, v->dir, v->absent};
    const int mtimes[] = {3600, -3600};
    for (size_t i = 0; i < 3; i++) {
        for (size_t m = 0; m < 2; m++) {
            CHECK(symlink(targets[i], lock) == 0);
            if (!set_link_mtime(lock, mtimes[m])) return false;
            lock_handle *h = NULL;
            OPEN(h, s, dir, "ttl=100ms");
            uint64_t fence = FENCE_SENTINEL;
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_NOT_A_LOCK);
            CHECK_RC(lock_acquire(h, 100, &fence), LOCK_ERR_NOT_A_LOCK);
            CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on LOCK_ERR_NOT_A_LOCK");
            lock_info info;
            CHECK_RC(lock_inspect(h, &info), LOCK_ERR_NOT_A_LOCK);
            bool was_held = false;
            CHECK_RC(lock_break(h, &was_held), LOCK_ERR_NOT_A_LOCK);
            CLOSE(h);
            char seen[512];
            ssize_t n = readlink(lock, seen, sizeof seen - 1);
            CHECK_MSG(n > 0, "the link to %s was removed", targets[i]);
            seen[n] = '\0';
            CHECK_MSG(strcmp(seen, targets[i]) == 0, "the link to %s now points to %s", targets[i], seen);
            if (!victim_untouched(v)) return false;
            CHECK(unlink(lock) == 0);
        }
    }
    return true;
}

/* A planted symlink at the lock path: LOCK_ERR_SYMLINK or LOCK_BUSY, never
 * followed, whatever it points to. (For the symlink strategy: no lock,
 * above.) */
static bool symlink_at_lock_path(const struct strategy *s, const char *dir) {
    struct victim v;
    if (!make_victim(&v, dir)) return false;
    if (s->lock_kind == 'l') return link_to_a_path_at_lock_path(s, dir, &v);
    char lock[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, s->lock_name);
    const char *targets[] = {v.file, v.dir, v.absent};
    for (size_t i = 0; i < 3; i++) {
        CHECK(symlink(targets[i], lock) == 0);
        lock_handle *h = NULL;
        OPEN(h, s, dir, "ttl=100ms");
        uint64_t fence = FENCE_SENTINEL;
        lock_result rc;
        CHECK_RC_EITHER(rc, lock_try_acquire(h, &fence), LOCK_ERR_SYMLINK, LOCK_BUSY);
        CHECK_RC_EITHER(rc, lock_acquire(h, 100, &fence), LOCK_ERR_SYMLINK, LOCK_TIMEOUT);
        CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on %s", rc_name(rc));
        lock_info info;
        rc = lock_inspect(h, &info);
        CHECK_MSG(rc == LOCK_ERR_SYMLINK || (rc == LOCK_OK && info.held),
                  "lock_inspect of a symlink returned %s, held %d", rc_name(rc), rc == LOCK_OK ? (int)info.held : -1);
        bool was_held;
        lock_break(h, &was_held); /* an operator's break may remove the link itself, never its target */
        CLOSE(h);
        if (!victim_untouched(&v)) return false;
        unlink(lock);
    }
    return true;
}

static bool test_symlink_at_lock_path(void) {
    return for_each_strategy(symlink_at_lock_path);
}

/* Symlinks planted where a lock keeps files beside it (its guard), and at
 * the fixed temporary names earlier versions used (<lock>.tmp, .new,
 * .compact), which someone who read old sources would plant: whatever each
 * call answers, nothing is written through them, and a link at an old name
 * is left as it is (it is not the library's: its temporary files have random names
 * now). toplock cycles until its queue has been compacted (the file is
 * shorter than after the cycle before), so that compaction runs too. */
static bool symlinks_at_derived_paths(const struct strategy *s, const char *base) {
    static const char *old_suffixes[] = {".tmp", ".new", ".compact"};
    char names[4][HARNESS_PATH_MAX];
    size_t count = 0;
    if (s->guard_name != NULL) format_into(names[count++], sizeof names[0], "%s", s->guard_name);
    for (size_t i = 0; i < sizeof old_suffixes / sizeof old_suffixes[0]; i++) {
        format_into(names[count++], sizeof names[0], "%s%s", s->lock_name, old_suffixes[i]);
    }
    bool compacts = strcmp(s->name, "toplock") == 0;
    for (size_t n = 0; n < count; n++) {
        bool is_guard = s->guard_name != NULL && strcmp(names[n], s->guard_name) == 0;
        for (size_t t = 0; t < 3; t++) {
            char dir[HARNESS_PATH_MAX], planted[HARNESS_PATH_MAX], lock[HARNESS_PATH_MAX];
            format_into(dir, sizeof dir, "%s/derived-%zu-%zu", base, n, t);
            CHECK(mkdir(dir, 0755) == 0);
            struct victim v;
            if (!make_victim(&v, dir)) return false;
            const char *target = t == 0 ? v.file : t == 1 ? v.dir : v.absent;
            path_join(planted, sizeof planted, dir, names[n]);
            path_join(lock, sizeof lock, dir, s->lock_name);
            CHECK(symlink(target, planted) == 0);
            lock_handle *h = NULL;
            OPEN(h, s, dir, NULL);
            off_t last_size = -1;
            bool compacted = false;
            int cycles = 0;
            do {
                cycles++;
                /* a budget, not one try: on a loaded machine (or under
                 * memcheck) one try may find its 50 ms too short */
                lock_result rc = lock_acquire(h, 10000, NULL);
                char message[512];
                last_error(message, sizeof message);
                if (is_guard) {
                    CHECK_MSG(rc == LOCK_ERR_SYMLINK, "a symlink at %s: lock_acquire returned %s (\"%s\")", names[n],
                              rc_name(rc), message);
                } else {
                    CHECK_MSG(rc == LOCK_OK, "a symlink at %s: lock_acquire returned %s (\"%s\")", names[n],
                              rc_name(rc), message);
                    CHECK_RC(lock_release(h, 0), LOCK_OK);
                }
                struct stat st;
                if (compacts && lstat(lock, &st) == 0) {
                    compacted = last_size >= 0 && st.st_size < last_size;
                    last_size = st.st_size;
                }
            } while (compacts && !is_guard && !compacted && cycles < 500);
            lock_info info;
            lock_inspect(h, &info);
            CLOSE(h);
            CHECK_MSG(!compacts || is_guard || compacted, "the queue file was not compacted after %d cycles", cycles);
            if (!victim_untouched(&v)) {
                harness_fail(__FILE__, __LINE__, "(the symlink was at %s, to %s)", names[n], target);
                return false;
            }
            char seen[HARNESS_PATH_MAX];
            ssize_t len = readlink(planted, seen, sizeof seen - 1);
            CHECK_MSG(len > 0 && (size_t)len == strlen(target) && memcmp(seen, target, (size_t)len) == 0,
                      "the link planted at %s was removed or replaced", names[n]);
        }
    }
    return true;
}

static bool test_symlinks_at_derived_paths(void) {
    return for_each_strategy(symlinks_at_derived_paths);
}

/* Something that is not a lock of this scheme where the lock belongs. */
static bool not_a_lock_at(const struct strategy *s, const char *dir, const char *what) {
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    uint64_t fence = FENCE_SENTINEL;
    char why[64];
    snprintf(why, sizeof why, "(%s at the lock path)", what);
    lock_result rc = lock_try_acquire(h, &fence);
    char message[512];
    last_error(message, sizeof message);
    CHECK_MSG(rc == LOCK_ERR_NOT_A_LOCK, "%s lock_try_acquire returned %s (\"%s\"), expected LOCK_ERR_NOT_A_LOCK", why,
              rc_name(rc), message);
    CHECK_RC(lock_acquire(h, 5000, &fence), LOCK_ERR_NOT_A_LOCK);
    CHECK(fence == FENCE_SENTINEL);
    CLOSE(h);
    return true;
}

static bool not_a_lock(const struct strategy *s, const char *dir) {
    char lock[HARNESS_PATH_MAX], inside[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, s->lock_name);
    if (s->lock_kind != 'f') {
        /* a regular file where the lock directory or link belongs */
        CHECK(write_text(lock, "not a lock\n"));
        if (!not_a_lock_at(s, dir, "a regular file")) return false;
        char content[64];
        CHECK_MSG(read_file(lock, content, sizeof content) == 11, "the file at the lock path was changed");
        unlink(lock);
    }
    if (s->lock_kind != 'd') {
        /* a directory where the lock file or link belongs, with something
         * inside. flock locks a directory as flock(1) does: taken, and left
         * as it was. */
        CHECK(mkdir(lock, 0755) == 0);
        path_join(inside, sizeof inside, lock, "inside");
        CHECK(write_text(inside, "x\n"));
        if (strcmp(s->name, "flock") == 0) {
            lock_handle *h = NULL, *other = NULL;
            OPEN(h, s, dir, NULL);
            OPEN(other, s, dir, NULL);
            CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
            CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
            CHECK_RC(lock_release(h, 0), LOCK_OK);
            CLOSE(h);
            CLOSE(other);
        } else if (!not_a_lock_at(s, dir, "a directory")) {
            return false;
        }
        struct stat st;
        char content[8];
        CHECK_MSG(lstat(lock, &st) == 0 && S_ISDIR(st.st_mode) && read_file(inside, content, sizeof content) == 2,
                  "the directory at the lock path was changed");
        remove_tree(lock);
    }
    /* a fifo: refused without blocking (the case runs under alarm()) */
    CHECK(mkfifo(lock, 0644) == 0);
    if (!not_a_lock_at(s, dir, "a fifo")) return false;
    struct stat st;
    CHECK_MSG(lstat(lock, &st) == 0 && S_ISFIFO(st.st_mode), "the fifo was removed");
    unlink(lock);
    /* the guard path holding a directory (flock, lease and toplock have no
     * guard: the fifo and the directory above were at their only file) */
    if (s->guard_name != NULL) {
        char guard[HARNESS_PATH_MAX];
        path_join(guard, sizeof guard, dir, s->guard_name);
        unlink(guard); /* made by the cases above; no lock is held now */
        CHECK(mkdir(guard, 0755) == 0);
        lock_handle *h = NULL;
        OPEN(h, s, dir, NULL);
        lock_result rc = lock_try_acquire(h, NULL);
        char message[512];
        last_error(message, sizeof message);
        CHECK_MSG(rc == LOCK_ERR_NOT_A_LOCK, "a directory at %s: lock_try_acquire returned %s (\"%s\")",
                  s->guard_name, rc_name(rc), message);
        CLOSE(h);
        rmdir(guard);
    }
    return true;
}

static bool not_a_lock_in_child(const struct strategy *s, const char *dir) {
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a hang on the fifo ends the child with SIGALRM */
        child_exit(not_a_lock(s, dir));
    }
    CHECK_CHILD_OK(pid);
    return true;
}

static bool test_not_a_lock(void) {
    return for_each_strategy(not_a_lock_in_child);
}

/* What is at a lock's path that is not what its scheme keeps there:
 *
 * - no format of the library's or of a peer's (a data file, junk): not a
 *   lock. Every call answers LOCK_ERR_NOT_A_LOCK, lock_break included, and
 *   the file is never written, removed or broken, however old it is;
 * - the library's marker (`lockcore 2`, `lease 2`, a queue header), damaged:
 *   LOCK_ERR_CORRUPT_RECORD (or _RECORD_TOO_LONG). The file is left as it
 *   is. A lock file or lock directory (lockfile, mkdir) holds nothing else,
 *   so lock_break removes it and so does age: past the TTL from its file's
 *   time it is stale. A lease or a queue keeps the last fence, which a
 *   rewrite would lose: only an operator removes it.
 *
 * symlink keeps no record file (its record is the link's target: a link
 * that does not parse is a foreign lock or none, test_symlink_at_lock_path
 * and test_foreign_locks in api.c), and
 * flock's target is the caller's data, never read: its record is kept in
 * its guard (corrupt_flock_record). */
static bool write_record(const struct strategy *s, const char *dir, const char *content, size_t len, char *record,
                         size_t record_len) {
    char lock[HARNESS_PATH_MAX];
    path_join(lock, sizeof lock, dir, s->lock_name);
    if (s->lock_kind == 'd') {
        if (!path_exists(lock)) CHECK(mkdir(lock, 0755) == 0);
        path_join(record, record_len, lock, "owner");
    } else {
        format_into(record, record_len, "%s", lock);
        unlink(record);
    }
    /* as the library makes them: a record read-only, a lease or queue not */
    CHECK(write_file(record, content, len, s->lock_file_stays ? 0600 : 0400));
    return true;
}

static void remove_record(const struct strategy *s, const char *record, const char *dir) {
    unlink(record);
    if (s->lock_kind == 'd') {
        char lock[HARNESS_PATH_MAX];
        path_join(lock, sizeof lock, dir, s->lock_name);
        rmdir(lock);
    }
}

/* Makes the file an hour old (the directory too, for mkdir). */
static bool age_record(const struct strategy *s, const char *record, const char *dir) {
    struct timespec old[2];
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 3600;
    old[1] = old[0];
    CHECK(utimensat(AT_FDCWD, record, old, AT_SYMLINK_NOFOLLOW) == 0);
    if (s->lock_kind == 'd') {
        char lock[HARNESS_PATH_MAX];
        path_join(lock, sizeof lock, dir, s->lock_name);
        CHECK(utimensat(AT_FDCWD, lock, old, AT_SYMLINK_NOFOLLOW) == 0);
    }
    return true;
}

/* `content` at the lock's record: every call answers `expected` and leaves
 * it, and lock_break removes it only where the text above says so. */
static bool refused_as(const struct strategy *s, const char *dir, const char *content, size_t len,
                       lock_result expected) {
    char record[HARNESS_PATH_MAX];
    if (!write_record(s, dir, content, len, record, sizeof record)) return false;
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, "ttl=10s");
    OPEN(other, s, dir, NULL);
    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &fence), expected);
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(h, 5000, &fence), expected); /* an error, not a wait */
    CHECK_MSG(mono_ms() - start < 2500, "lock_acquire waited on %s", rc_name(expected));
    CHECK_RC(lock_try_acquire(other, &fence), expected); /* the failure left nothing held */
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on %s", rc_name(expected));
    lock_info info, untouched;
    memset(&info, 0x5A, sizeof info);
    untouched = info;
    CHECK_RC(lock_inspect(h, &info), expected);
    CHECK_MSG(memcmp(&info, &untouched, sizeof info) == 0, "info_out written on %s", rc_name(expected));
    static char after[40 * 1024];
    ssize_t n = read_file(record, after, sizeof after);
    CHECK_MSG(n == (ssize_t)len && memcmp(after, content, len) == 0, "the file was changed");

    bool recovers = expected != LOCK_ERR_NOT_A_LOCK && !s->lock_file_stays;
    bool was_held = !recovers;
    lock_result broken = lock_break(h, &was_held);
    if (recovers) {
        CHECK_MSG(broken == LOCK_OK && was_held, "lock_break of a damaged lock: %s, was_held %d", rc_name(broken),
                  (int)was_held);
        CHECK_MSG(!path_exists(record), "lock_break left the damaged record");
    } else {
        CHECK_MSG(broken == expected && was_held, "lock_break returned %s, expected %s (was_held %d)",
                  rc_name(broken), rc_name(expected), (int)was_held);
        n = read_file(record, after, sizeof after);
        CHECK_MSG(n == (ssize_t)len && memcmp(after, content, len) == 0, "lock_break changed the file");
        /* age does not make it a lock anyone may break */
        if (!age_record(s, record, dir)) return false;
        CHECK_RC(lock_try_acquire(h, &fence), expected);
        n = read_file(record, after, sizeof after);
        CHECK_MSG(n == (ssize_t)len && memcmp(after, content, len) == 0, "an hour old, the file was changed");
        remove_record(s, record, dir); /* the operator's way out */
    }
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* A record of ours, damaged, and older than the TTL: stale by age, broken
 * and taken (lockfile, mkdir). */
static bool corrupt_and_old_is_broken(const struct strategy *s, const char *dir, const char *content) {
    char record[HARNESS_PATH_MAX];
    if (!write_record(s, dir, content, strlen(content), record, sizeof record)) return false;
    if (!age_record(s, record, dir)) return false;
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=10s");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK(info.held_by_this_handle);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

/* The bytes of a record of ours, as the lock holds it while held. */
static bool real_record(const struct strategy *s, const char *dir, bool held, char *out, size_t cap, ssize_t *len) {
    char path[HARNESS_PATH_MAX];
    path_join(path, sizeof path, dir, s->lock_name);
    if (s->lock_kind == 'd') {
        size_t used = strlen(path);
        format_into(path + used, sizeof path - used, "/owner");
    }
    lock_handle *h = NULL;
    OPEN(h, s, dir, "ttl=1h");
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    if (!held) CHECK_RC(lock_release(h, 0), LOCK_OK);
    *len = read_file(path, out, cap);
    if (held) CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CHECK_MSG(*len > 0, "cannot read %s", path);
    return true;
}

/* lockfile, mkdir: `PID` (LockFile::Simple's line), then our record line. */
static bool corrupt_lock_file(const struct strategy *s, const char *dir) {
    char real[1024], text[1024];
    ssize_t real_len = 0;
    if (!real_record(s, dir, true, real, sizeof real, &real_len)) return false;
    char *second = strchr(real, '\n');
    CHECK_MSG(second != NULL && strncmp(second + 1, "lockcore 2 ", 11) == 0, "the record is \"%s\"", real);
    size_t first_len = (size_t)(second - real) + 1;

    /* no format at all */
    if (!refused_as(s, dir, "garbage\n", 8, LOCK_ERR_NOT_A_LOCK)) return false;
    if (!refused_as(s, dir, "\xff\xfe\x00\x01 binary", 12, LOCK_ERR_NOT_A_LOCK)) return false;
    static char sevens[700];
    memset(sevens, '7', sizeof sevens);
    sevens[sizeof sevens - 1] = '\n';
    if (!refused_as(s, dir, sevens, sizeof sevens, LOCK_ERR_NOT_A_LOCK)) return false;
    /* ours, cut inside the record line, or with a word that does not parse */
    if (!refused_as(s, dir, real, first_len + 11 + 9, LOCK_ERR_CORRUPT_RECORD)) return false;
    format_into(text, sizeof text, "%.*slockcore 2 not a record\n", (int)first_len, real);
    if (!refused_as(s, dir, text, strlen(text), LOCK_ERR_CORRUPT_RECORD)) return false;
    /* ours, with a line after it */
    format_into(text, sizeof text, "%.*smore\n", (int)real_len, real);
    if (!refused_as(s, dir, text, strlen(text), LOCK_ERR_CORRUPT_RECORD)) return false;
    /* ours, longer than any record the library writes (512 bytes) */
    static char long_record[700];
    memcpy(long_record, real, (size_t)real_len);
    memset(long_record + real_len - 1, 'x', sizeof long_record - (size_t)real_len);
    long_record[sizeof long_record - 1] = '\n';
    if (!refused_as(s, dir, long_record, sizeof long_record, LOCK_ERR_RECORD_TOO_LONG)) return false;
    format_into(text, sizeof text, "%.*slockcore 2 not a record\n", (int)first_len, real);
    return corrupt_and_old_is_broken(s, dir, text);
}

/* lease: one fixed-length line `lease 2 held <record>` or `lease 2 free
 * <fence> <not before>`. Its expiry is a field of the line, never the
 * file's mtime: no age makes a damaged lease stale. */
static bool corrupt_lease(const struct strategy *s, const char *dir) {
    if (!refused_as(s, dir, "garbage\n", 8, LOCK_ERR_NOT_A_LOCK)) return false;
    if (!refused_as(s, dir, "lease 2 what\n", 13, LOCK_ERR_CORRUPT_RECORD)) return false;
    if (!refused_as(s, dir, "\xff\xfe\x00\x01 binary", 12, LOCK_ERR_NOT_A_LOCK)) return false;
    static char long_lease[700];
    memset(long_lease, ' ', sizeof long_lease);
    memcpy(long_lease, "lease 2 free 1 -", 16);
    long_lease[sizeof long_lease - 1] = '\n';
    if (!refused_as(s, dir, long_lease, sizeof long_lease, LOCK_ERR_RECORD_TOO_LONG)) return false;
    /* a real lease, held and then free, cut short */
    for (int held = 1; held >= 0; held--) {
        char real[1024];
        ssize_t real_len = 0;
        if (!real_record(s, dir, held == 1, real, sizeof real, &real_len)) return false;
        CHECK_MSG(real_len > 100 && real[real_len - 1] == '\n' && strncmp(real, "lease 2 ", 8) == 0,
                  "the lease file is %zd bytes: \"%.40s\"", real_len, real);
        if (!refused_as(s, dir, real, 100, LOCK_ERR_CORRUPT_RECORD)) return false;
    }
    return true;
}

/* shm: a whole file of SHM_FILE_LEN bytes, mapped (harness.h). One cut
 * short is refused before it is mapped (touching a page past its end would
 * fault): corrupt, its marker being there. A whole one is judged by the
 * lease line in its active slot, which no age makes stale, as a lease's:
 * one that does not parse is corrupt. Neither is ever mended: the file
 * keeps the last fence. Taking the section word to read the slot leaves its
 * bytes as they were once it is let go, so the file is compared whole. */
static bool corrupt_shm(const struct strategy *s, const char *dir) {
    if (!refused_as(s, dir, "garbage\n", 8, LOCK_ERR_NOT_A_LOCK)) return false;
    if (!refused_as(s, dir, "\xff\xfe\x00\x01 binary", 12, LOCK_ERR_NOT_A_LOCK)) return false;
    static char real[SHM_FILE_LEN + 1], damaged[SHM_FILE_LEN];
    for (int held = 1; held >= 0; held--) {
        ssize_t real_len = 0;
        if (!real_record(s, dir, held == 1, real, sizeof real, &real_len)) return false;
        CHECK_MSG(real_len == SHM_FILE_LEN && strncmp(real, "shm 3 ", 6) == 0, "the shm file is %zd bytes: \"%.40s\"",
                  real_len, real);
        size_t slot = shm_active_slot(real);
        const char *line = held == 1 ? "lease 2 held " : "lease 2 free ";
        CHECK_MSG(slot != 0 && strncmp(real + slot, line, strlen(line)) == 0,
                  "the active slot (at %zu) holds \"%.40s\"", slot, slot != 0 ? real + slot : "");
        /* cut short: to its header line, and by its last byte */
        if (!refused_as(s, dir, real, 64, LOCK_ERR_CORRUPT_RECORD)) return false;
        if (!refused_as(s, dir, real, SHM_FILE_LEN - 1, LOCK_ERR_CORRUPT_RECORD)) return false;
        /* whole, its active lease line with a word that does not parse */
        memcpy(damaged, real, SHM_FILE_LEN);
        memcpy(damaged + slot + 8, "what", 4);
        if (!refused_as(s, dir, damaged, SHM_FILE_LEN, LOCK_ERR_CORRUPT_RECORD)) return false;
    }
    return true;
}

/* toplock: an append-only log after a header line. A line that does not
 * parse is an append torn by a writer killed inside write(2): skipped,
 * never an error, and never removed. A second header is no torn append:
 * corrupt. A file without a header is no queue: not a lock. A file past
 * the replay buffer (16 KiB) is too long. Calls that append may add lines
 * after the damage, but never change what is there. */
static bool queue_starts_with(const char *queue, const char *content, size_t len) {
    static char now[32 * 1024];
    ssize_t n = read_file(queue, now, sizeof now);
    CHECK_MSG(n >= (ssize_t)len && memcmp(now, content, len) == 0, "the queue file's first %zu bytes were changed",
              len);
    return true;
}

static bool append_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_APPEND);
    CHECK_MSG(fd >= 0, "open(%s): %s", path, strerror(errno));
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    CHECK_MSG(n == (ssize_t)strlen(text), "cannot append to %s", path);
    return true;
}

static bool corrupt_queue(const struct strategy *s, const char *dir) {
    char queue[HARNESS_PATH_MAX];
    path_join(queue, sizeof queue, dir, s->lock_name);
    if (!refused_as(s, dir, "garbage\n", 8, LOCK_ERR_NOT_A_LOCK)) return false;
    if (!refused_as(s, dir, "R 0123456789abcdef\n", 19, LOCK_ERR_NOT_A_LOCK)) return false;

    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, NULL);
    OPEN(other, s, dir, NULL);
    /* a torn line, complete or the last one without its newline: skipped */
    const char *torn[] = {"garbage\n", "R 0123456789abcdef\n", "R 0123456789abcdef"};
    static char before[32 * 1024];
    for (size_t i = 0; i < 3; i++) {
        unlink(queue);
        CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK); /* a fresh queue, with its header */
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        CHECK(append_text(queue, torn[i]));
        ssize_t before_len = read_file(queue, before, sizeof before);
        CHECK(before_len > 0);
        uint64_t fence = 0;
        /* the unterminated line is closed by the next append, in the same
         * write: one attempt is enough */
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
        CHECK_MSG(fence > 0, "fence %" PRIu64, fence);
        CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY);
        lock_info info;
        CHECK_RC(lock_inspect(other, &info), LOCK_OK);
        CHECK_MSG(info.held && info.fence == fence && info.queue_length == 1,
                  "after a torn line %zu: held %d, fence %" PRIu64 " (got %" PRIu64 "), queue %" PRIu32, i,
                  (int)info.held, info.fence, fence, info.queue_length);
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        if (!queue_starts_with(queue, before, (size_t)before_len)) return false;
    }

    /* its own header again, after the start: corrupt, for every call */
    char header[512];
    CHECK(read_file(queue, header, sizeof header) > 0);
    char *end = strchr(header, '\n');
    CHECK(header[0] == 'H' && end != NULL);
    end[1] = '\0';
    CHECK(append_text(queue, header));
    ssize_t len = read_file(queue, before, sizeof before);
    CHECK(len > 0);
    CLOSE(h);
    CLOSE(other);
    static char damaged[32 * 1024];
    memcpy(damaged, before, (size_t)len);
    unlink(queue);
    if (!refused_as(s, dir, damaged, (size_t)len, LOCK_ERR_CORRUPT_RECORD)) return false;

    /* larger than any queue the library reads (a full log and the
     * checkpoint of a compaction cut short: 32 KiB) */
    static char huge[33 * 1024];
    memcpy(huge, header, strlen(header));
    for (size_t i = strlen(header); i < sizeof huge; i++) huge[i] = (i % 64 == 63) ? '\n' : 'g';
    return refused_as(s, dir, huge, sizeof huge, LOCK_ERR_RECORD_TOO_LONG);
}

/* Writes a record that does not parse after the guard line of a flock
 * lock's guard, as another user of a shared lock could. */
static bool damage_flock_record(const char *guard) {
    int fd = open(guard, O_WRONLY);
    CHECK(fd >= 0);
    bool damaged = pwrite(fd, "lockcore 2 what\n", 16, 160) == 16 && ftruncate(fd, 176) == 0;
    close(fd);
    CHECK(damaged);
    return true;
}

/* flock: the holder's record follows the guard line in its guard (the
 * target is the caller's data). Damaged while held, it is corrupt for
 * those who read it (inspect), but not for the holder, whose kernel lock
 * says it holds the lock: its release goes on and mends the guard. A guard
 * without a record reads as a lock held by nobody known. */
static bool corrupt_flock_record(const struct strategy *s, const char *dir) {
    char guard[HARNESS_PATH_MAX];
    CHECK(s->guard_name != NULL);
    path_join(guard, sizeof guard, dir, s->guard_name);
    lock_handle *h = NULL, *other = NULL;
    OPEN(h, s, dir, NULL);
    OPEN(other, s, dir, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    char content[1024];
    ssize_t len = read_file(guard, content, sizeof content);
    CHECK_MSG(len > 160 && strncmp(content + 160, "lockcore 2 ", 11) == 0,
              "the guard holds no record after its line: \"%.200s\"", content);
    CHECK(damage_flock_record(guard));
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_ERR_CORRUPT_RECORD);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_BUSY); /* still held */
    CHECK(truncate(guard, 160) == 0);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && info.owner_pid == 0, "a held flock without a record: held %d, pid %d", (int)info.held,
              (int)info.owner_pid);
    CHECK(damage_flock_record(guard));
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held, "held after the holder let go of a lock whose record was damaged");
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

static bool corrupt_record(const struct strategy *s, const char *dir) {
    if (s->lock_kind == 'l') {
        SKIP_STRATEGY(s, "a symlink lock has no record file: its record is the link's target, and a target that does "
                         "not parse is a foreign lock or none (test_symlink_at_lock_path; "
                         "test_foreign_locks in api.c); anything but a link there is test_not_a_lock's");
    }
    if (strcmp(s->name, "flock") == 0) return corrupt_flock_record(s, dir);
    if (strcmp(s->name, "lease") == 0) return corrupt_lease(s, dir);
    if (strcmp(s->name, "toplock") == 0) return corrupt_queue(s, dir);
    if (strcmp(s->name, "shm") == 0) return corrupt_shm(s, dir);
    return corrupt_lock_file(s, dir);
}

static bool test_corrupt_record(void) {
    return for_each_strategy(corrupt_record);
}

/* A guard file (<lock>.guard: fence and cooldown) with its marker that does
 * not parse: LOCK_ERR_CORRUPT_GUARD, never silently reset (that would lose
 * the fence). One without the marker is someone else's file: not a lock. */
static bool corrupt_guard(const struct strategy *s, const char *dir) {
    if (s->guard_name == NULL) {
        SKIP_STRATEGY(s, "no guard file: %s keeps fence and cooldown in %s (test_corrupt_record)", s->name,
                      strcmp(s->name, "toplock") == 0 ? "the queue log it replays" : "the lock file itself");
    }
    char guard[HARNESS_PATH_MAX], lock[HARNESS_PATH_MAX], valid[512];
    path_join(guard, sizeof guard, dir, s->guard_name);
    path_join(lock, sizeof lock, dir, s->lock_name);
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    ssize_t valid_len = read_file(guard, valid, sizeof valid);
    CHECK_MSG(valid_len > 40, "no guard file %s after a lock (%zd bytes)", guard, valid_len);

    CHECK_MSG(strncmp(valid, "lockguard 2 ", 12) == 0, "the guard starts \"%.20s\"", valid);
    char flipped[256];
    memcpy(flipped, valid, (size_t)valid_len);
    flipped[GUARD_FENCE_OFFSET] = 'x';

    for (int variant = 0; variant < 4; variant++) {
        /* garbage, empty; a valid line cut short, one with a word that does
         * not parse */
        const char *content = variant == 0 ? "garbage\n" : variant == 1 ? "" : variant == 2 ? valid : flipped;
        size_t len = variant == 0 ? strlen(content) : variant == 1 ? 0 : variant == 2 ? 40 : (size_t)valid_len;
        lock_result expected = variant < 2 ? LOCK_ERR_NOT_A_LOCK : LOCK_ERR_CORRUPT_GUARD;
        CHECK(write_file(guard, content, len, 0600));
        uint64_t fence = FENCE_SENTINEL;
        CHECK_RC(lock_try_acquire(h, &fence), expected);
        CHECK_RC(lock_acquire(h, 5000, &fence), expected);
        CHECK(fence == FENCE_SENTINEL);
        lock_info info, untouched;
        memset(&info, 0x5A, sizeof info);
        untouched = info;
        CHECK_RC(lock_inspect(h, &info), expected);
        CHECK(memcmp(&info, &untouched, sizeof info) == 0);
        if (!s->ttl_is_advisory) {
            bool was_held = true;
            CHECK_RC(lock_break(h, &was_held), expected);
            CHECK(was_held == true);
        }
        char after[256];
        CHECK_MSG(read_file(guard, after, sizeof after) == (ssize_t)len && memcmp(after, content, len) == 0,
                  "the damaged guard was changed (variant %d)", variant);
        CHECK_MSG(s->lock_file_stays || !path_exists(lock), "a lock was created beside a damaged guard");
    }
    CLOSE(h);
    return true;
}

static bool test_corrupt_guard(void) {
    return for_each_strategy(corrupt_guard);
}

/* Who may take a lock is its `mode`: 0600 by default, the owner alone. A
 * file of the lock that others could write (here its guard, or for a
 * scheme without one the lock file itself, made 0666 by its owner) is
 * refused with LOCK_ERR_UNTRUSTED by every call, before it is read or
 * written, and the message names the call, the file, its owner and mode.
 * The same file is trusted by a lock whose mode=0666 lets everyone take
 * it (a private-only scheme refuses that spec instead), and again by the
 * private lock once its bits are 0600. The lock's directory is held to the
 * same rule, unless it is sticky like /tmp. */
static bool untrusted(const struct strategy *s, const char *dir) {
    char state[HARNESS_PATH_MAX];
    path_join(state, sizeof state, dir, s->guard_name != NULL ? s->guard_name : s->lock_name);
    lock_handle *h = NULL, *shared = NULL;
    OPEN(h, s, dir, NULL);
    if (private_only(s)) {
        char spec[HARNESS_PATH_MAX + 64];
        make_spec(spec, sizeof spec, s, dir, "mode=0666");
        if (!open_fails(spec, LOCK_ERR_SPEC_BAD_VALUE, "mode")) return false;
    } else {
        OPEN(shared, s, dir, "mode=0666");
    }
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    struct stat st;
    CHECK(lstat(state, &st) == 0);
    CHECK_MSG((st.st_mode & 07777) == 0600, "%s has mode %04o, not the private 0600", state,
              (unsigned)(st.st_mode & 07777));
    static char before[32 * 1024];
    ssize_t before_len = read_file(state, before, sizeof before);
    CHECK(before_len > 0);

    CHECK(chmod(state, 0666) == 0);
    usleep(LOCKCORE_LOOK_BELIEVED_US); /* a handle that keeps its file mapped looks again after this */
    char expected[HARNESS_PATH_MAX + 64], message[1024], user[64] = "";
    format_into(expected, sizeof expected, "lock_try_acquire: %s: ", state);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &probe), LOCK_ERR_UNTRUSTED);
    last_error(message, sizeof message);
    snprintf(user, sizeof user, "(uid %ld), mode 0666]", (long)geteuid());
    CHECK_MSG(strncmp(message, expected, strlen(expected)) == 0 && strstr(message, user) != NULL,
              "the message \"%s\" does not name the call, %s, its owner and its mode 0666", message, state);
    CHECK_RC(lock_acquire(h, 5000, &probe), LOCK_ERR_UNTRUSTED); /* an error, not a wait */
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written on LOCK_ERR_UNTRUSTED");
    lock_info info, untouched;
    memset(&info, 0x5A, sizeof info);
    untouched = info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_UNTRUSTED);
    CHECK_MSG(memcmp(&info, &untouched, sizeof info) == 0, "info_out written on LOCK_ERR_UNTRUSTED");
    if (!s->ttl_is_advisory) {
        bool was_held = true;
        CHECK_RC(lock_break(h, &was_held), LOCK_ERR_UNTRUSTED);
        CHECK(was_held);
    }
    static char after[40 * 1024];
    ssize_t after_len = read_file(state, after, sizeof after);
    CHECK_MSG(after_len == before_len && memcmp(before, after, (size_t)after_len) == 0,
              "%s was written while untrusted", state);

    /* a lock everyone may take trusts it */
    uint64_t last_fence = fence;
    if (shared != NULL) {
        uint64_t shared_fence = 0;
        CHECK_RC(lock_try_acquire(shared, &shared_fence), LOCK_OK);
        CHECK_MSG(shared_fence > last_fence, "fence %" PRIu64 " after %" PRIu64, shared_fence, last_fence);
        CHECK_RC(lock_release(shared, 0), LOCK_OK);
        last_fence = shared_fence;
    }
    /* its owner closes it again: trusted again */
    CHECK(chmod(state, 0600) == 0);
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_MSG(fence > last_fence, "fence %" PRIu64 " after %" PRIu64, fence, last_fence);
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    /* a directory others may write, without the sticky bit: refused, and
     * named; with it (as /tmp), trusted. (Checked when a handle opens the
     * lock's files: one that has them open notices a file replaced, and
     * checks again then.) */
    lock_handle *fresh = NULL, *again = NULL;
    OPEN(fresh, s, dir, NULL);
    OPEN(again, s, dir, NULL);
    CHECK(chmod(dir, 0777) == 0);
    lock_result in_open_dir = lock_try_acquire(fresh, &probe);
    last_error(message, sizeof message);
    CHECK(chmod(dir, 01777) == 0);
    lock_result in_sticky_dir = lock_try_acquire(again, NULL);
    if (in_sticky_dir == LOCK_OK) in_sticky_dir = lock_release(again, 0);
    CHECK(chmod(dir, 0755) == 0);
    CLOSE(fresh);
    CLOSE(again);
    CHECK_MSG(in_open_dir == LOCK_ERR_UNTRUSTED, "in a directory of mode 0777: %s (\"%s\")", rc_name(in_open_dir),
              message);
    format_into(expected, sizeof expected, "lock_try_acquire: %s: ", dir);
    CHECK_MSG(strncmp(message, expected, strlen(expected)) == 0 && strstr(message, "mode 0777]") != NULL,
              "the message \"%s\" does not name the directory %s and its mode", message, dir);
    CHECK_RC(in_sticky_dir, LOCK_OK);
    CLOSE(h);
    if (shared != NULL) CLOSE(shared);
    return true;
}

static bool test_untrusted_files(void) {
    return for_each_strategy(untrusted);
}

static const struct test_case CASES[] = {
    {"test_spec_syntax", test_spec_syntax},
    {"test_spec_unknown_scheme", test_spec_unknown_scheme},
    {"test_spec_unknown_key", test_spec_unknown_key},
    {"test_spec_bad_value", test_spec_bad_value},
    {"test_spec_duplicate_key", test_spec_duplicate_key},
    {"test_path_too_long", test_path_too_long},
    {"test_missing_directory", test_missing_directory},
    {"test_permission_denied", test_permission_denied},
    {"test_busy", test_busy},
    {"test_release_twice", test_release_twice},
    {"test_refused_release_keeps_renewal", test_refused_release_keeps_renewal},
    {"test_failed_release_keeps_renewal", test_failed_release_keeps_renewal},
    {"test_failed_release_on_close", test_failed_release_on_close},
    {"test_prolong_after_release", test_prolong_after_release},
    {"test_acquire_twice", test_acquire_twice},
    {"test_null_arguments", test_null_arguments},
    {"test_strerror", test_strerror},
    {"test_last_error_message", test_last_error_message},
    {"test_handle_in_use", test_handle_in_use},
    {"test_symlink_at_lock_path", test_symlink_at_lock_path},
    {"test_symlinks_at_derived_paths", test_symlinks_at_derived_paths},
    {"test_not_a_lock", test_not_a_lock},
    {"test_corrupt_record", test_corrupt_record},
    {"test_corrupt_guard", test_corrupt_guard},
    {"test_untrusted_files", test_untrusted_files},
};

int main(int argc, char **argv) {
    return run_tests("errors", CASES, sizeof CASES / sizeof CASES[0], argc > 1 ? argv[1] : NULL);
}
