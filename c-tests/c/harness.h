/*
 * harness.h: what the C test programs (api.c, errors.c, strategies.c,
 * counter.c, server.c) share.
 *
 * Style of regex-capi's ctest/test.c and rustls-ffi's tests: one
 * `static bool test_xxx(void)` per case, a table of cases, and for each case
 * one line `PASSED test_xxx` or `FAILED test_xxx: <why>` (or `SKIPPED
 * test_xxx: <why>`); main exits 1 if any case failed. `why` names file and
 * line of the failed check and, for a lock_* call, the code it returned, its
 * lock_strerror text and lock_last_error_message. A per-strategy case that
 * does not apply to one strategy prints `    skipped for <strategy>: <why>`.
 *
 * Everything here is `static` (one copy per program) and marked unused so
 * that a program that needs only part of it compiles under -Werror.
 */
#ifndef LOCKFFI_C_TESTS_HARNESS_H
#define LOCKFFI_C_TESTS_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lockffi.h"

#ifdef __GNUC__
#define HARNESS_UNUSED __attribute__((unused))
#define HARNESS_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define HARNESS_UNUSED
#define HARNESS_PRINTF(fmt, args)
#endif

#define HARNESS_PATH_MAX 4096

/* ------------------------------------------------------------------------ */
/* Failure messages                                                         */
/* ------------------------------------------------------------------------ */

/* Why the running case failed; several failures are joined with "; ". */
static char harness_why[4096];
static size_t harness_why_len;
/* Prefixed to each failure: the strategy a per-strategy case is running. */
static const char *harness_context;
/* Set by a case that cannot run here, with the reason. */
static char harness_skip_reason[512];

HARNESS_UNUSED HARNESS_PRINTF(3, 4) static void harness_fail(const char *file, int line, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base != NULL ? base + 1 : file;
    if (harness_why_len >= sizeof harness_why - 1) return;
    int n = snprintf(harness_why + harness_why_len, sizeof harness_why - harness_why_len, "%s%s%s%s%s:%d: %s",
                     harness_why_len > 0 ? "; " : "", harness_context != NULL ? "[" : "",
                     harness_context != NULL ? harness_context : "", harness_context != NULL ? "] " : "", base,
                     line, text);
    if (n > 0) {
        harness_why_len += (size_t)n;
        if (harness_why_len >= sizeof harness_why) harness_why_len = sizeof harness_why - 1;
    }
}

HARNESS_UNUSED static const char *rc_name(int code) {
    switch (code) {
    case LOCK_OK: return "LOCK_OK";
    case LOCK_EXPIRED: return "LOCK_EXPIRED";
    case LOCK_LOST: return "LOCK_LOST";
    case LOCK_BUSY: return "LOCK_BUSY";
    case LOCK_TIMEOUT: return "LOCK_TIMEOUT";
    case LOCK_CANCELLED: return "LOCK_CANCELLED";
    case LOCK_ERR_NULL_ARGUMENT: return "LOCK_ERR_NULL_ARGUMENT";
    case LOCK_ERR_NOT_HELD: return "LOCK_ERR_NOT_HELD";
    case LOCK_ERR_ALREADY_HELD: return "LOCK_ERR_ALREADY_HELD";
    case LOCK_ERR_FORKED: return "LOCK_ERR_FORKED";
    case LOCK_ERR_HANDLE_IN_USE: return "LOCK_ERR_HANDLE_IN_USE";
    case LOCK_ERR_UNSUPPORTED: return "LOCK_ERR_UNSUPPORTED";
    case LOCK_ERR_BUFFER_TOO_SMALL: return "LOCK_ERR_BUFFER_TOO_SMALL";
    case LOCK_ERR_INVALID_ARGUMENT: return "LOCK_ERR_INVALID_ARGUMENT";
    case LOCK_ERR_SPEC_SYNTAX: return "LOCK_ERR_SPEC_SYNTAX";
    case LOCK_ERR_SPEC_UNKNOWN_SCHEME: return "LOCK_ERR_SPEC_UNKNOWN_SCHEME";
    case LOCK_ERR_SPEC_UNKNOWN_KEY: return "LOCK_ERR_SPEC_UNKNOWN_KEY";
    case LOCK_ERR_SPEC_BAD_VALUE: return "LOCK_ERR_SPEC_BAD_VALUE";
    case LOCK_ERR_SPEC_DUPLICATE_KEY: return "LOCK_ERR_SPEC_DUPLICATE_KEY";
    case LOCK_ERR_PATH_TOO_LONG: return "LOCK_ERR_PATH_TOO_LONG";
    case LOCK_ERR_SPEC_BAD_URL: return "LOCK_ERR_SPEC_BAD_URL";
    case LOCK_ERR_NOT_FOUND: return "LOCK_ERR_NOT_FOUND";
    case LOCK_ERR_PERMISSION: return "LOCK_ERR_PERMISSION";
    case LOCK_ERR_SYMLINK: return "LOCK_ERR_SYMLINK";
    case LOCK_ERR_NOT_A_LOCK: return "LOCK_ERR_NOT_A_LOCK";
    case LOCK_ERR_CORRUPT_RECORD: return "LOCK_ERR_CORRUPT_RECORD";
    case LOCK_ERR_RECORD_TOO_LONG: return "LOCK_ERR_RECORD_TOO_LONG";
    case LOCK_ERR_CORRUPT_GUARD: return "LOCK_ERR_CORRUPT_GUARD";
    case LOCK_ERR_SYSTEM: return "LOCK_ERR_SYSTEM";
    case LOCK_ERR_COMMIT: return "LOCK_ERR_COMMIT";
    case LOCK_ERR_NOT_A_DIRECTORY: return "LOCK_ERR_NOT_A_DIRECTORY";
    case LOCK_ERR_UNTRUSTED: return "LOCK_ERR_UNTRUSTED";
    case LOCK_ERR_SERVER_UNKNOWN_HOST: return "LOCK_ERR_SERVER_UNKNOWN_HOST";
    case LOCK_ERR_SERVER_UNREACHABLE: return "LOCK_ERR_SERVER_UNREACHABLE";
    case LOCK_ERR_SERVER_NO_ANSWER: return "LOCK_ERR_SERVER_NO_ANSWER";
    case LOCK_ERR_SERVER_DISCONNECTED: return "LOCK_ERR_SERVER_DISCONNECTED";
    case LOCK_ERR_SERVER_AUTH: return "LOCK_ERR_SERVER_AUTH";
    case LOCK_ERR_SERVER_NOT_READY: return "LOCK_ERR_SERVER_NOT_READY";
    case LOCK_ERR_SERVER_READ_ONLY: return "LOCK_ERR_SERVER_READ_ONLY";
    case LOCK_ERR_SERVER_NO_WRITES: return "LOCK_ERR_SERVER_NO_WRITES";
    case LOCK_ERR_SERVER_REFUSED: return "LOCK_ERR_SERVER_REFUSED";
    case LOCK_ERR_SERVER_FOREIGN_KEYS: return "LOCK_ERR_SERVER_FOREIGN_KEYS";
    case LOCK_ERR_SERVER_PROTOCOL: return "LOCK_ERR_SERVER_PROTOCOL";
    case LOCK_ERR_SERVER_NOT_REPLICATED: return "LOCK_ERR_SERVER_NOT_REPLICATED";
    case LOCK_ERR_PANIC: return "LOCK_ERR_PANIC";
    default: return "(unknown code)";
    }
}

/* Every code of the header, for the tests that walk all of them. */
HARNESS_UNUSED static const lock_result ALL_CODES[] = {
    LOCK_OK,
    LOCK_EXPIRED,
    LOCK_LOST,
    LOCK_BUSY,
    LOCK_TIMEOUT,
    LOCK_CANCELLED,
    LOCK_ERR_NULL_ARGUMENT,
    LOCK_ERR_NOT_HELD,
    LOCK_ERR_ALREADY_HELD,
    LOCK_ERR_FORKED,
    LOCK_ERR_HANDLE_IN_USE,
    LOCK_ERR_UNSUPPORTED,
    LOCK_ERR_BUFFER_TOO_SMALL,
    LOCK_ERR_INVALID_ARGUMENT,
    LOCK_ERR_SPEC_SYNTAX,
    LOCK_ERR_SPEC_UNKNOWN_SCHEME,
    LOCK_ERR_SPEC_UNKNOWN_KEY,
    LOCK_ERR_SPEC_BAD_VALUE,
    LOCK_ERR_SPEC_DUPLICATE_KEY,
    LOCK_ERR_PATH_TOO_LONG,
    LOCK_ERR_SPEC_BAD_URL,
    LOCK_ERR_NOT_FOUND,
    LOCK_ERR_PERMISSION,
    LOCK_ERR_SYMLINK,
    LOCK_ERR_NOT_A_LOCK,
    LOCK_ERR_CORRUPT_RECORD,
    LOCK_ERR_RECORD_TOO_LONG,
    LOCK_ERR_CORRUPT_GUARD,
    LOCK_ERR_SYSTEM,
    LOCK_ERR_COMMIT,
    LOCK_ERR_NOT_A_DIRECTORY,
    LOCK_ERR_UNTRUSTED,
    LOCK_ERR_SERVER_UNKNOWN_HOST,
    LOCK_ERR_SERVER_UNREACHABLE,
    LOCK_ERR_SERVER_NO_ANSWER,
    LOCK_ERR_SERVER_DISCONNECTED,
    LOCK_ERR_SERVER_AUTH,
    LOCK_ERR_SERVER_NOT_READY,
    LOCK_ERR_SERVER_READ_ONLY,
    LOCK_ERR_SERVER_NO_WRITES,
    LOCK_ERR_SERVER_REFUSED,
    LOCK_ERR_SERVER_FOREIGN_KEYS,
    LOCK_ERR_SERVER_PROTOCOL,
    LOCK_ERR_SERVER_NOT_REPLICATED,
    LOCK_ERR_PANIC,
};
#define ALL_CODES_COUNT (sizeof ALL_CODES / sizeof ALL_CODES[0])

/* The last error message of this thread, as a string (cut at 511 bytes). */
HARNESS_UNUSED static const char *last_error(char *buf, size_t len) {
    lock_last_error_message(buf, len);
    return buf;
}

/* Records a lock_* call that returned `got` where `expected` was wanted. */
HARNESS_UNUSED static void harness_fail_rc(const char *file, int line, const char *call, int got, int expected,
                                           const char *last) {
    harness_fail(file, line, "%s returned %d %s (\"%s\"; last error: \"%s\"), expected %d %s (\"%s\")", call, got,
                 rc_name(got), lock_strerror(got), last, expected, rc_name(expected), lock_strerror(expected));
}

/* Fails the case (returns false from the calling function) unless `expr`. */
#define CHECK_MSG(expr, ...)                                                                                           \
    do {                                                                                                               \
        if (!(expr)) {                                                                                                 \
            harness_fail(__FILE__, __LINE__, __VA_ARGS__);                                                             \
            return false;                                                                                              \
        }                                                                                                              \
    } while (0)

#define CHECK(expr) CHECK_MSG(expr, "check failed: %s", #expr)

/* Fails the case unless the lock_* call returns `expected`. */
#define CHECK_RC(call, expected)                                                                                       \
    do {                                                                                                               \
        lock_result check_rc_got_ = (call);                                                                            \
        if (check_rc_got_ != (expected)) {                                                                             \
            char check_rc_last_[512];                                                                                  \
            harness_fail_rc(__FILE__, __LINE__, #call, (int)check_rc_got_, (int)(expected),                            \
                            last_error(check_rc_last_, sizeof check_rc_last_));                                        \
            return false;                                                                                              \
        }                                                                                                              \
    } while (0)

/* As CHECK_RC, but stores the result in `var` and accepts either of two codes. */
#define CHECK_RC_EITHER(var, call, first, second)                                                                      \
    do {                                                                                                               \
        (var) = (call);                                                                                                \
        if ((var) != (first) && (var) != (second)) {                                                                   \
            char check_rc_last_[512];                                                                                  \
            harness_fail(__FILE__, __LINE__, "%s returned %d %s (\"%s\"; last error: \"%s\"), expected %s or %s",      \
                         #call, (int)(var), rc_name((int)(var)), lock_strerror((int)(var)),                            \
                         last_error(check_rc_last_, sizeof check_rc_last_), rc_name((int)(first)),                     \
                         rc_name((int)(second)));                                                                      \
            return false;                                                                                              \
        }                                                                                                              \
    } while (0)

/* A case that cannot run here says why, and is reported as skipped. */
#define SKIP(...)                                                                                                      \
    do {                                                                                                               \
        snprintf(harness_skip_reason, sizeof harness_skip_reason, __VA_ARGS__);                                        \
        return true;                                                                                                   \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Time                                                                     */
/* ------------------------------------------------------------------------ */

HARNESS_UNUSED static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

HARNESS_UNUSED static double mono_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

HARNESS_UNUSED static int64_t unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps at least `ms` milliseconds. Only ever used to let a TTL or a
 * cooldown pass, never to wait for another process. */
HARNESS_UNUSED static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------ */
/* Files and temporary directories                                          */
/* ------------------------------------------------------------------------ */

/* snprintf into a buffer that must be large enough (paths, specs): a
 * truncated path would make a test act on the wrong file, so it aborts. */
HARNESS_UNUSED HARNESS_PRINTF(3, 4) static void format_into(char *out, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "harness: \"%s...\" does not fit its buffer of %zu bytes\n", out, len);
        abort();
    }
}

HARNESS_UNUSED static void path_join(char *out, size_t len, const char *dir, const char *name) {
    format_into(out, len, "%s/%s", dir, name);
}

/* Writes `len` bytes to a new or truncated file with `mode`. */
HARNESS_UNUSED static bool write_file(const char *path, const char *content, size_t len, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return false;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, content + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            close(fd);
            return false;
        }
        done += (size_t)n;
    }
    return close(fd) == 0;
}

HARNESS_UNUSED static bool write_text(const char *path, const char *text) {
    return write_file(path, text, strlen(text), 0644);
}

/* Reads up to `cap - 1` bytes of a file, NUL-terminated; -1 if unreadable. */
HARNESS_UNUSED static ssize_t read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done + 1 < cap) {
        ssize_t n = read(fd, buf + done, cap - 1 - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    buf[done] = '\0';
    close(fd);
    return (ssize_t)done;
}

HARNESS_UNUSED static bool path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Removes a file tree without following symlinks; best effort. */
HARNESS_UNUSED static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    chmod(path, 0700); /* a 0500 test directory, when not root */
    DIR *dir = opendir(path);
    if (dir != NULL) {
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
            char child[HARNESS_PATH_MAX];
            path_join(child, sizeof child, path, entry->d_name);
            remove_tree(child);
        }
        closedir(dir);
    }
    rmdir(path);
}

/* The program's temporary directory, made on first use: mkdtemp under
 * $TMPDIR or /tmp, mode 0755 so that a child that dropped privileges can
 * reach the directories inside. Removed at the end if every case passed. */
static char harness_root[HARNESS_PATH_MAX];
static unsigned harness_dir_serial;

HARNESS_UNUSED static bool harness_make_root(const char *program) {
    if (harness_root[0] != '\0') return true;
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0') tmp = "/tmp";
    format_into(harness_root, sizeof harness_root, "%s/lockffi-c-%s-XXXXXX", tmp, program);
    if (mkdtemp(harness_root) == NULL) {
        fprintf(stderr, "mkdtemp(%s): %s\n", harness_root, strerror(errno));
        harness_root[0] = '\0';
        return false;
    }
    chmod(harness_root, 0755);
    return true;
}

/* Makes a fresh, empty directory for one case (or one strategy of a case). */
HARNESS_UNUSED static bool make_temp_dir(char *out, size_t len, const char *tag) {
    if (harness_root[0] == '\0' && !harness_make_root("test")) return false;
    format_into(out, len, "%s/%s-%u", harness_root, tag, ++harness_dir_serial);
    return mkdir(out, 0755) == 0;
}

/* ------------------------------------------------------------------------ */
/* Strategies and specs                                                     */
/* ------------------------------------------------------------------------ */

/* The schemes come from lockcore's own list (`Scheme::ALL`): build.rs
 * writes lockcore_schemes.h with each scheme's name and the files lockcore
 * names for a target `data` (`Lock::path`, `Lock::guard_path`), and whether
 * its locks can go stale and be broken (`Scheme::breaks_stale_locks`). A
 * scheme added to lockcore is run by every per-scheme case with no change
 * here. Today:
 *
 *   lockfile  lock file data.lock (the target is the protected file, never
 *             touched), guard data.lock.guard (fence, cooldown).
 *   mkdir     lock directory data/ holding only the record `owner`; guard
 *             data.guard.
 *   flock     flock(2) on data itself (opened read-only, made empty if
 *             missing); fence, cooldown and the holder's record in
 *             data.guard. Never stale, never broken: its TTL is advisory.
 *   symlink   the link data, whose target is the owner record and whose own
 *             mtime is the expiry; guard data.guard.
 *   lease     the lease file data (one fixed-size line); no guard.
 *   toplock   the queue file data (a header line, then an append-only log);
 *             no guard.
 *   shm       the file data, 4 KiB, mapped shared by every process that
 *             uses the lock (SHM_FILE_LEN below): a lease changed under a
 *             section word in it; no guard, no file lock.
 *             Private only (private_only below).
 *
 * Temporary files are `<lock>.<32 random hex digits>`, made and renamed or
 * linked into place at once: none is ever left behind.
 *
 * Two facts lockcore does not state are observed once per program, before
 * the first case (harness_probe_schemes): what stands at the lock path while
 * the lock is held (a file, a directory or a symlink), and whether it stays
 * after release (flock's target, the lease and the queue do). The cases then
 * check every lock against that shape.
 */
struct strategy {
    const char *name;       /* the spec's scheme */
    const char *target;     /* the spec's target, relative to the case directory */
    const char *lock_name;  /* the path that is the lock (lock_path) */
    const char *guard_name; /* the guard <lock>.guard, or NULL: the lock file keeps that state itself */
    bool ttl_is_advisory;   /* !Scheme::breaks_stale_locks (flock): a live holder's lock is never taken or broken */
    bool keeps_a_queue;     /* Ability::Queue (toplock): lock_info.queue_length counts the waiters and the holder */
    /* observed by harness_probe_schemes() */
    char lock_kind;       /* what is at lock_name while held: 'f' file, 'd' directory, 'l' symlink */
    bool lock_file_stays; /* the lock path remains after release */
};

#include "lockcore_schemes.h"

#define HARNESS_SCHEME(name, target, lock, guard, breaks_stale_locks, keeps_a_queue)                                   \
    {name, target, lock, guard, !(breaks_stale_locks), keeps_a_queue, 0, false},
HARNESS_UNUSED static struct strategy STRATEGIES[] = {LOCKCORE_SCHEMES(HARNESS_SCHEME)};
#undef HARNESS_SCHEME
#define STRATEGY_COUNT (sizeof STRATEGIES / sizeof STRATEGIES[0])

/* Whether a scheme takes only locks private to their owner (mode=0600):
 * every process that uses a shm lock maps its file, and whoever may write a
 * mapped file may shorten it under the others, who die of SIGBUS at their
 * next touch. So its spec refuses a mode that lets others write (0660,
 * 0666, 0606) with LOCK_ERR_SPEC_BAD_VALUE about `mode`, and the cases that
 * share a lock check that refusal instead. Not a fact lockcore lists. */
HARNESS_UNUSED static bool private_only(const struct strategy *s) {
    return strcmp(s->name, "shm") == 0;
}

/* A shm lock's file, made complete by the library and then changed only in
 * place, through the mapping: a header line (`shm 3 ...`), the section word
 * that orders every change at LOCKCORE_SHM_SECTION_AT (as lockcore states it), the
 * index of the active slot (0 or 1) at SHM_ACTIVE_AT, and two slots, each
 * holding a lease line as the lease scheme writes it. The lock's state is
 * the line in the active slot. */
#define SHM_FILE_LEN 4096
#define SHM_ACTIVE_AT 128
#define SHM_SLOT_0_AT 256
#define SHM_SLOT_1_AT 640

/* Where the active slot's lease line starts in a whole shm file, or 0 when
 * its index is neither 0 nor 1 (no file the library made). */
HARNESS_UNUSED static size_t shm_active_slot(const char *file) {
    uint32_t index;
    memcpy(&index, file + SHM_ACTIVE_AT, sizeof index);
    return index == 0 ? SHM_SLOT_0_AT : index == 1 ? SHM_SLOT_1_AT : 0;
}

/* The scheme called `name`, or NULL. The cases about what one scheme alone
 * does find it by name; they fail (CHECK) if it is gone. */
HARNESS_UNUSED static const struct strategy *strategy_named(const char *name) {
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        if (strcmp(STRATEGIES[i].name, name) == 0) return &STRATEGIES[i];
    }
    return NULL;
}

/* Finds a scheme by name for a case, or fails it. */
#define SCHEME(var, name_text)                                                                                         \
    const struct strategy *var = strategy_named(name_text);                                                            \
    CHECK_MSG(var != NULL, "lockcore has no scheme \"%s\"", name_text)

/* `scheme:<dir>/<target>` and, if `options` is not NULL or empty, `?options`. */
HARNESS_UNUSED static void make_spec(char *out, size_t len, const struct strategy *s, const char *dir,
                                     const char *options) {
    bool has_options = options != NULL && options[0] != '\0';
    format_into(out, len, "%s:%s/%s%s%s", s->name, dir, s->target, has_options ? "?" : "",
                has_options ? options : "");
}

/* lock_open of make_spec(s, dir, options). */
HARNESS_UNUSED static lock_result open_lock(const struct strategy *s, const char *dir, const char *options,
                                            lock_handle **out) {
    char spec[HARNESS_PATH_MAX + 256];
    make_spec(spec, sizeof spec, s, dir, options);
    return lock_open(spec, out);
}

/* Opens a handle or fails the case. */
#define OPEN(handle, s, dir, options) CHECK_RC(open_lock((s), (dir), (options), &(handle)), LOCK_OK)

/* Closes a handle and fails the case unless lock_close answers LOCK_OK:
 * nothing was held, or the release it made went through in time. */
#define CLOSE(handle) CHECK_RC(lock_close(handle), LOCK_OK)

/* A per-strategy case that does not apply to one strategy says why with
 * SKIP_STRATEGY(s, reason...) and returns; the line is printed at once, and
 * a case skipped for every strategy is reported SKIPPED, never PASSED. */
static unsigned harness_strategy_skips;

HARNESS_UNUSED HARNESS_PRINTF(2, 3) static void harness_note_skip(const char *strategy, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("    skipped for %s: %s\n", strategy, text);
    fflush(stdout);
    harness_strategy_skips++;
}

#define SKIP_STRATEGY(s, ...)                                                                                          \
    do {                                                                                                               \
        harness_note_skip((s)->name, __VA_ARGS__);                                                                     \
        return true;                                                                                                   \
    } while (0)

/* Runs `body` once per strategy, each in a fresh directory, and passes only
 * if it passes for all of them; failures are tagged with the strategy. */
typedef bool (*strategy_body)(const struct strategy *s, const char *dir);

HARNESS_UNUSED static bool for_each_strategy(strategy_body body) {
    bool ok = true;
    size_t ran = 0;
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        char dir[HARNESS_PATH_MAX];
        harness_context = STRATEGIES[i].name;
        if (!make_temp_dir(dir, sizeof dir, STRATEGIES[i].name)) {
            harness_fail(__FILE__, __LINE__, "cannot make a temporary directory: %s", strerror(errno));
            ok = false;
            continue;
        }
        unsigned skips = harness_strategy_skips;
        if (!body(&STRATEGIES[i], dir)) ok = false;
        if (harness_strategy_skips == skips) ran++;
    }
    harness_context = NULL;
    if (ok && ran == 0) snprintf(harness_skip_reason, sizeof harness_skip_reason, "skipped for every strategy");
    return ok;
}

/* Observes, for each scheme, what stands at its lock path while held and
 * whether it stays after release, in a directory of its own. False (with
 * the reason in harness_why) if a scheme cannot be locked at all. */
HARNESS_UNUSED static bool harness_probe_scheme(struct strategy *s) {
    char dir[HARNESS_PATH_MAX], lock[HARNESS_PATH_MAX];
    CHECK_MSG(make_temp_dir(dir, sizeof dir, "probe"), "cannot make a directory: %s", strerror(errno));
    path_join(lock, sizeof lock, dir, s->lock_name);
    lock_handle *h = NULL;
    OPEN(h, s, dir, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    struct stat st;
    bool present = lstat(lock, &st) == 0;
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_close(h), LOCK_OK);
    CHECK_MSG(present, "%s does not exist while the lock is held", lock);
    s->lock_kind = S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : S_ISREG(st.st_mode) ? 'f' : '?';
    CHECK_MSG(s->lock_kind != '?', "%s is neither a file, a directory nor a symlink while held", lock);
    s->lock_file_stays = path_exists(lock);
    remove_tree(dir);
    return true;
}

HARNESS_UNUSED static bool harness_probe_schemes(void) {
    for (size_t i = 0; i < STRATEGY_COUNT; i++) {
        harness_context = STRATEGIES[i].name;
        if (!harness_probe_scheme(&STRATEGIES[i])) return false;
    }
    harness_context = NULL;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                */
/* ------------------------------------------------------------------------ */

/* fork() with stdio flushed first, so that the child's exit() does not
 * print the parent's buffered output a second time. */
HARNESS_UNUSED static pid_t fork_child(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child reports only its own failures. */
        harness_why[0] = '\0';
        harness_why_len = 0;
    }
    return pid;
}

/* waitpid() that retries on EINTR; the status, or -1. */
HARNESS_UNUSED static int wait_child(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

HARNESS_UNUSED static const char *describe_status(int status, char *buf, size_t len) {
    if (status == -1) {
        snprintf(buf, len, "waitpid failed");
    } else if (WIFEXITED(status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    } else {
        snprintf(buf, len, "wait status %#x", (unsigned)status);
    }
    return buf;
}

/* Fails the case unless the child exited with status 0. */
#define CHECK_CHILD_OK(pid)                                                                                            \
    do {                                                                                                               \
        int check_child_status_ = wait_child(pid);                                                                     \
        char check_child_text_[64];                                                                                    \
        CHECK_MSG(check_child_status_ != -1 && WIFEXITED(check_child_status_) && WEXITSTATUS(check_child_status_) == 0, \
                  "child %ld %s (its failure is printed above)", (long)(pid),                                          \
                  describe_status(check_child_status_, check_child_text_, sizeof check_child_text_));                  \
    } while (0)

/* Ends a child: prints why it failed, if it did, and leaves with _exit(),
 * which runs no exit handlers (the library's autoclean included). */
HARNESS_UNUSED static void child_exit(bool ok) {
    if (!ok) printf("    child %ld: %s\n", (long)getpid(), harness_why);
    fflush(NULL);
    _exit(ok ? 0 : 1);
}

/* Ends a child with exit(), as a program returning from main would: exit
 * handlers run, the library's autoclean among them. */
HARNESS_UNUSED static void child_exit_normally(bool ok) {
    if (!ok) printf("    child %ld: %s\n", (long)getpid(), harness_why);
    fflush(NULL);
    exit(ok ? 0 : 1);
}

/* Reads exactly `len` bytes from a pipe; false on EOF or error. */
HARNESS_UNUSED static bool read_exact(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

HARNESS_UNUSED static bool write_exact(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* The runner                                                               */
/* ------------------------------------------------------------------------ */

struct test_case {
    const char *name;
    bool (*run)(void);
};

/* A case that hangs (a library call that never returns) must fail, not
 * stall the test run: each case runs under alarm(), and the handler reports
 * the case and ends the program. Children of fork() do not inherit it. */
#define HARNESS_CASE_SECONDS 120
static const char *volatile harness_running_case;

static void harness_write_raw(const char *text) {
    size_t len = 0;
    while (text[len] != '\0') len++;
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, text, len);
        if (n <= 0) return;
        text += n;
        len -= (size_t)n;
    }
}

static void harness_on_alarm(int signal) {
    (void)signal;
    harness_write_raw("\nFAILED ");
    harness_write_raw(harness_running_case != NULL ? harness_running_case : "(between cases)");
    harness_write_raw(": timed out: a call did not return within the case's limit\n");
    _exit(1);
}

HARNESS_UNUSED static void harness_install_watchdog(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = harness_on_alarm;
    sigemptyset(&action.sa_mask);
    sigaction(SIGALRM, &action, NULL);
}

/* Runs the cases whose name contains `filter` (all if NULL), one line each,
 * after probing the schemes of the table if `probe_schemes` (a program whose
 * cases use no file scheme, server.c, has no use for it). Returns the exit
 * status for main: 0 if none failed, else 1. */
HARNESS_UNUSED static int run_program(const char *program, const struct test_case *cases, size_t count,
                                      const char *filter, bool probe_schemes) {
    umask(022);
    if (!harness_make_root(program)) {
        printf("FAILED %s: cannot make a temporary directory\n", program);
        return 1;
    }
    printf("lock library %s, C test program %s, in %s\n", lock_version(), program, harness_root);
    if (probe_schemes && !harness_probe_schemes()) {
        printf("FAILED %s: the schemes could not be probed: %s\n", program, harness_why);
        return 1;
    }
    harness_install_watchdog();
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < count; i++) {
        if (filter != NULL && strstr(cases[i].name, filter) == NULL) continue;
        harness_why[0] = '\0';
        harness_why_len = 0;
        harness_skip_reason[0] = '\0';
        harness_context = NULL;
        double start = mono_seconds();
        fflush(stdout);
        harness_running_case = cases[i].name;
        alarm(HARNESS_CASE_SECONDS);
        bool ok = cases[i].run();
        alarm(0);
        harness_running_case = NULL;
        double seconds = mono_seconds() - start;
        if (ok && harness_why_len > 0) ok = false; /* a failure recorded without returning false */
        if (ok && harness_skip_reason[0] != '\0') {
            printf("SKIPPED %s: %s\n", cases[i].name, harness_skip_reason);
            skipped++;
        } else if (ok) {
            printf("PASSED %s (%.2f s)\n", cases[i].name, seconds);
            passed++;
        } else {
            printf("FAILED %s: %s\n", cases[i].name, harness_why_len > 0 ? harness_why : "(no reason recorded)");
            failed++;
        }
        fflush(stdout);
    }
    printf("%s: %d passed, %d failed, %d skipped\n", program, passed, failed, skipped);
    if (failed == 0) {
        remove_tree(harness_root);
    } else {
        printf("kept %s for inspection\n", harness_root);
    }
    return failed == 0 ? 0 : 1;
}

/* run_program for the programs whose cases run on the schemes' table. */
HARNESS_UNUSED static int run_tests(const char *program, const struct test_case *cases, size_t count,
                                    const char *filter) {
    return run_program(program, cases, count, filter, true);
}

/* What a warning callback read with lock_last_error_message(): its first
 * message, and how often it was called. `self` points at the struct, so
 * that a callback given another context does nothing. */
struct warning_text {
    struct warning_text *self;
    int calls;
    char first[1024];
};

/* A warning callback that keeps the first message in a struct warning_text. */
HARNESS_UNUSED static void keep_warning_text(void *context, uint64_t waited_ms) {
    struct warning_text *text = context;
    (void)waited_ms;
    if (text == NULL || text->self != text) return;
    if (text->calls++ == 0) lock_last_error_message(text->first, sizeof text->first);
}

/* Whether lock_inspect described a lock never taken: free, and every field
 * empty. */
HARNESS_UNUSED static bool info_is_empty(const lock_info *info) {
    return !info->held && !info->held_by_this_handle && !info->stale && info->owner_liveness == LOCK_OWNER_UNKNOWN &&
           info->owner_pid == 0 && info->owner_host[0] == '\0' && info->fence == 0 && info->last_fence == 0 &&
           info->expires_unix_ms == 0 && info->cooldown_until_unix_ms == 0 && info->queue_length == 0 &&
           info->since_unix_ms == 0;
}

#endif /* LOCKFFI_C_TESTS_HARNESS_H */
