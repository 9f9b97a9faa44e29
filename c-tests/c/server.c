/*
 * server.c: the C API on a lock that a server keeps (the `redis` scheme),
 * against the redis-server processes the test runner started for it
 * (tests/c_programs.rs). The other programs run on the schemes whose locks
 * are files; none of their cases reaches a server.
 *
 * Usage: c_server [name-filter]
 *
 * The servers, from the environment (each a spec without its lock's name,
 * which every case makes its own, so that no two cases meet):
 *
 *   LOCKFFI_TEST_REDIS_SPEC_BASE       redis://%2F...%2Fredis.sock/  (unix socket)
 *   LOCKFFI_TEST_REDIS_TCP_SPEC_BASE   redis://127.0.0.1:PORT/, the same server
 *   LOCKFFI_TEST_REDIS_AUTH_SPEC_BASE  a second server, started with --requirepass
 *   LOCKFFI_TEST_REDIS_PASSWORD        its password
 *
 * A case whose server is not given says SKIPPED. Each case prints `PASSED
 * test_xxx` or `FAILED test_xxx: <why>`; the exit status is 1 if any failed.
 * Other processes are synchronised with pipes, waitpid() and lock_inspect;
 * sleeps only let a TTL or a cooldown run out on the server, or pace those
 * lock_inspect polls.
 *
 * A failing call's message must name the call and the lock as the library
 * names a lock that keeps no file: "lock_xxx: redis://<server>/<name>: ...",
 * the server being the socket's path (decoded) or host:port, never the
 * password.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "harness.h"

/* Pre-filled into outputs that a failing call must leave alone. */
#define FENCE_SENTINEL UINT64_C(0x5EA15EA15EA15EA1)

/* How long a case waits for what should take milliseconds (a child to
 * queue, a waiter to get its turn): a guard against hangs, never a claim
 * about speed. Valgrind and a loaded machine are slow. */
#define PATIENCE_MS 30000

/* ------------------------------------------------------------------------ */
/* Servers and names                                                        */
/* ------------------------------------------------------------------------ */

struct server {
    const char *base;             /* "redis://<host>/": a spec without its name; NULL if not given */
    char shown[HARNESS_PATH_MAX]; /* "redis://<host, decoded>/": how messages name it */
};

static struct server main_server, tcp_server, auth_server;
static const char *auth_password;

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The first `len` bytes of `in`, percent-decoded, NUL-terminated; false if
 * they hold a bad escape or do not fit. */
static bool percent_decode(const char *in, size_t len, char *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '%') {
            if (i + 2 >= len) return false;
            int high = hex_digit(in[i + 1]), low = hex_digit(in[i + 2]);
            if (high < 0 || low < 0) return false;
            c = (char)(high * 16 + low);
            i += 2;
        }
        if (n + 1 >= cap) return false;
        out[n++] = c;
    }
    out[n] = '\0';
    return true;
}

/* `in` with every byte but letters, digits, '-', '_' and '.' as %XX: how a
 * socket's path or a password goes into a spec. */
static void percent_encode(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p != '\0'; p++) {
        bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                     *p == '-' || *p == '_' || *p == '.';
        if (n + 4 >= cap) {
            fprintf(stderr, "server.c: \"%s\" does not fit %zu bytes once encoded\n", in, cap);
            abort();
        }
        if (plain) {
            out[n++] = (char)*p;
        } else {
            snprintf(out + n, cap - n, "%%%02X", *p);
            n += 3;
        }
    }
    out[n] = '\0';
}

/* A server from a spec base "redis://<host>/"; the host part is shown
 * decoded, as the library's messages show it. */
static bool server_at(struct server *srv, const char *base) {
    static const char prefix[] = "redis://";
    size_t len = strlen(base);
    if (strncmp(base, prefix, sizeof prefix - 1) != 0 || len <= sizeof prefix || base[len - 1] != '/') return false;
    char host[HARNESS_PATH_MAX];
    const char *start = base + sizeof prefix - 1;
    if (!percent_decode(start, (size_t)(base + len - 1 - start), host, sizeof host)) return false;
    srv->base = base;
    format_into(srv->shown, sizeof srv->shown, "%s%s/", prefix, host);
    return true;
}

/* The server named by `variable`, if the runner gave one. A value that is
 * no spec base ends the program: every case would fail for it. */
static void server_from_env(struct server *srv, const char *variable) {
    const char *base = getenv(variable);
    srv->base = NULL;
    if (base == NULL || base[0] == '\0') return;
    if (!server_at(srv, base)) {
        fprintf(stderr, "server.c: %s=\"%s\" is not redis://<host>/\n", variable, base);
        exit(2);
    }
}

/* Skips the case unless the server is given. */
#define REQUIRE(srv, variable)                                                                                         \
    do {                                                                                                               \
        if ((srv)->base == NULL) SKIP("%s is not set: no server to run on", variable);                                 \
    } while (0)

#define REQUIRE_SERVER() REQUIRE(&main_server, "LOCKFFI_TEST_REDIS_SPEC_BASE")

/* A lock name no other case, program run or earlier run uses. */
static void new_name(char *out, size_t len, const char *tag) {
    static unsigned serial;
    format_into(out, len, "c-server-%ld-%s-%u", (long)getpid(), tag, ++serial);
}

static void server_spec(char *out, size_t len, const struct server *srv, const char *name, const char *options) {
    bool has_options = options != NULL && options[0] != '\0';
    format_into(out, len, "%s%s%s%s", srv->base, name, has_options ? "?" : "", has_options ? options : "");
}

static lock_result open_on(const struct server *srv, const char *name, const char *options, lock_handle **out) {
    char spec[HARNESS_PATH_MAX + 512];
    server_spec(spec, sizeof spec, srv, name, options);
    return lock_open(spec, out);
}

/* Opens a handle of the lock `name` on a server, or fails the case. */
#define OPEN_ON(handle, srv, name, options) CHECK_RC(open_on((srv), (name), (options), &(handle)), LOCK_OK)
#define OPEN_NAMED(handle, name, options) OPEN_ON(handle, &main_server, name, options)

/* Fails unless this thread's last message (read right after the call) is
 * "<op>: <srv><name>: ..." and holds `also`, if not NULL. */
static bool message_names(const char *op, const struct server *srv, const char *name, const char *also) {
    char message[1024], lock[HARNESS_PATH_MAX + 256], head[HARNESS_PATH_MAX + 300];
    lock_last_error_message(message, sizeof message);
    format_into(lock, sizeof lock, "%s%s", srv->shown, name);
    format_into(head, sizeof head, "%s: %s: ", op, lock);
    CHECK_MSG(strncmp(message, head, strlen(head)) == 0, "the message does not begin with \"%s\": \"%s\"", head,
              message);
    CHECK_MSG(also == NULL || strstr(message, also) != NULL, "the message does not say \"%s\": \"%s\"", also,
              message);
    return true;
}

#define CHECK_MESSAGE(op, srv, name, also)                                                                             \
    do {                                                                                                               \
        if (!message_names((op), (srv), (name), (also))) return false;                                                 \
    } while (0)

/* "held by pid <getpid()>", as a message names a holder of this process. */
static const char *held_by_me(char *out, size_t len) {
    format_into(out, len, "held by pid %ld", (long)getpid());
    return out;
}

/* Fails unless `expires` is `ttl_ms` after a moment in [before, after],
 * give or take the server's rounding to whole milliseconds. */
static bool expires_between(int64_t expires, int64_t before, int64_t after, int64_t ttl_ms) {
    CHECK_MSG(expires >= before + ttl_ms - 5 && expires <= after + ttl_ms + 5,
              "expires_unix_ms %" PRId64 " is not %" PRId64 " ms after [%" PRId64 ", %" PRId64 "]", expires, ttl_ms,
              before, after);
    return true;
}

/* Polls lock_inspect until queue_length is `want`; the length seen last
 * goes to *seen. */
static bool wait_queue_length(lock_handle *observer, uint32_t want, uint32_t *seen) {
    int64_t deadline = mono_ms() + PATIENCE_MS;
    lock_info info;
    do {
        CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
        *seen = info.queue_length;
        if (info.queue_length == want) return true;
        sleep_ms(2);
    } while (mono_ms() < deadline);
    harness_fail(__FILE__, __LINE__, "queue_length stayed %" PRIu32 ", never reached %" PRIu32, *seen, want);
    return false;
}

/* Waits until the server has let an expired lock go: it expires the key by
 * its own clock, a little after the holder's own lease ran out. */
static bool wait_until_free(lock_handle *observer) {
    int64_t deadline = mono_ms() + PATIENCE_MS;
    lock_info info;
    do {
        CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
        if (!info.held) return true;
        sleep_ms(10);
    } while (mono_ms() < deadline);
    harness_fail(__FILE__, __LINE__, "the server never let the expired lock go (pid %d, expires %" PRId64 ")",
                 (int)info.owner_pid, info.expires_unix_ms);
    return false;
}

/* ------------------------------------------------------------------------ */
/* Specs                                                                    */
/* ------------------------------------------------------------------------ */

/* Where a failed lock_open must leave *handle_out. */
static char sentinel_byte;
#define SENTINEL_HANDLE ((lock_handle *)(void *)&sentinel_byte)

static bool open_fails(const char *spec, lock_result expected, const char *needle) {
    lock_handle *h = SENTINEL_HANDLE;
    lock_result rc = lock_open(spec, &h);
    char message[512];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(rc == expected, "lock_open(\"%s\") returned %s (\"%s\"), expected %s", spec, rc_name(rc), message,
              rc_name(expected));
    CHECK_MSG(h == SENTINEL_HANDLE, "lock_open(\"%s\") wrote *handle_out on failure", spec);
    CHECK_MSG(strncmp(message, "lock_open: ", 11) == 0 && strstr(message, needle) != NULL,
              "the message for \"%s\" is \"%s\", which does not name \"%s\"", spec, message, needle);
    return true;
}

/* A redis target is //[user[:password]@]host[:port][/db]/key; the scheme
 * takes no option of the file schemes. No server is reached. */
static bool test_spec_errors(void) {
    lock_handle *h = NULL;
    CHECK_RC(lock_open("redis://127.0.0.1:1/a-name?ttl=5s&fair=0&stale=none&warn=0", &h), LOCK_OK);
    CLOSE(h);
    CHECK_RC(lock_open("redis://user:pw@%2Ftmp%2Fnone.sock/3/a/name/with/slashes", &h), LOCK_OK);
    CLOSE(h);
    return open_fails("redis:/tmp/x", LOCK_ERR_SPEC_BAD_URL, "//") &&
           open_fails("redis://127.0.0.1", LOCK_ERR_SPEC_BAD_URL, "key") &&
           open_fails("redis://127.0.0.1/}name", LOCK_ERR_SPEC_BAD_URL, "}") &&
           open_fails("redis://127.0.0.1/name?ext=.lock", LOCK_ERR_SPEC_UNKNOWN_KEY, "ext") &&
           open_fails("redis://127.0.0.1/name?signal=TERM", LOCK_ERR_SPEC_UNKNOWN_KEY, "signal") &&
           open_fails("redis://127.0.0.1/name?ttl=soon", LOCK_ERR_SPEC_BAD_VALUE, "ttl");
}

/* ------------------------------------------------------------------------ */
/* Taking and giving back                                                   */
/* ------------------------------------------------------------------------ */

/* try_acquire, release, acquire, release; fences strictly increase over
 * two handles and a third opened later; lock_close releases a held lock. */
static bool cycle_on(const struct server *srv) {
    char name[128];
    new_name(name, sizeof name, "cycle");
    lock_handle *a = NULL, *b = NULL, *c = NULL;
    OPEN_ON(a, srv, name, "ttl=30s");
    OPEN_ON(b, srv, name, NULL);
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == 0, "a lock never taken: held %d, last_fence %" PRIu64, (int)info.held,
              info.last_fence);

    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(a, &fence), LOCK_OK);
    CHECK_MSG(fence > 0, "the first fence is %" PRIu64, fence);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.held_by_this_handle && info.fence == fence && info.last_fence == fence &&
                  info.owner_pid == (int32_t)getpid(),
              "while held: held %d, by b %d, fence %" PRIu64 ", last_fence %" PRIu64 ", pid %d (acquired %" PRIu64
              ")",
              (int)info.held, (int)info.held_by_this_handle, info.fence, info.last_fence, (int)info.owner_pid, fence);
    CHECK_RC(lock_release(a, 0), LOCK_OK);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == fence, "after release: held %d, last_fence %" PRIu64, (int)info.held,
              info.last_fence);

    /* lock_acquire, with the optional fence output left NULL */
    CHECK_RC(lock_acquire(a, 1000, NULL), LOCK_OK);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held && info.fence > fence, "lock_acquire's fence %" PRIu64 " after %" PRIu64, info.fence, fence);
    uint64_t last = info.fence;
    CHECK_RC(lock_release(a, 0), LOCK_OK);

    /* a, a, b, a, b, b: the same handle twice in a row and alternating */
    lock_handle *order[] = {a, a, b, a, b, b};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        lock_handle *h = order[i];
        lock_handle *observer = h == a ? b : a;
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
        CHECK_MSG(fence > last, "acquisition %zu got fence %" PRIu64 " after %" PRIu64, i, fence, last);
        CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
        CHECK_MSG(info.fence == fence && info.last_fence == fence,
                  "inspect shows fence %" PRIu64 ", last_fence %" PRIu64 "; the holder got %" PRIu64, info.fence,
                  info.last_fence, fence);
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        last = fence;
    }
    OPEN_ON(c, srv, name, NULL);
    CHECK_RC(lock_acquire(c, 1000, &fence), LOCK_OK);
    CHECK_MSG(fence > last, "a new handle got fence %" PRIu64 " after %" PRIu64, fence, last);

    /* lock_close releases a lock still held, and says so: LOCK_OK */
    CHECK_RC(lock_close(c), LOCK_OK);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == fence, "after lock_close of a held lock: held %d, last_fence %" PRIu64,
              (int)info.held, info.last_fence);
    CHECK_RC(lock_try_acquire(b, NULL), LOCK_OK);
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CLOSE(a);
    CLOSE(b);
    return true;
}

static bool test_cycle_and_fences(void) {
    REQUIRE_SERVER();
    if (!cycle_on(&main_server)) return false;
    if (tcp_server.base == NULL) return true;
    harness_context = "tcp";
    bool ok = cycle_on(&tcp_server);
    harness_context = NULL;
    return ok;
}

/* While another handle holds: lock_try_acquire answers LOCK_BUSY and
 * lock_acquire LOCK_TIMEOUT once its budget ran out, not before, and by
 * it; neither writes the fence; the messages name the holder. */
static bool test_busy_and_timeout(void) {
    REQUIRE_SERVER();
    char name[128], me[64];
    new_name(name, sizeof name, "busy");
    held_by_me(me, sizeof me);
    lock_handle *a = NULL, *b = NULL;
    OPEN_NAMED(a, name, NULL);
    OPEN_NAMED(b, name, NULL);
    uint64_t fa = 0;
    CHECK_RC(lock_acquire(a, 1000, &fa), LOCK_OK);

    uint64_t fb = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_BUSY);
    CHECK_MESSAGE("lock_try_acquire", &main_server, name, me);
    CHECK_MSG(fb == FENCE_SENTINEL, "fence_out was written on LOCK_BUSY");

    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(b, 500, &fb), LOCK_TIMEOUT);
    int64_t waited = mono_ms() - start;
    CHECK_MESSAGE("lock_acquire", &main_server, name, me);
    CHECK_MSG(waited >= 490, "LOCK_TIMEOUT after %" PRId64 " ms of a 500 ms budget", waited);
    CHECK_MSG(waited < 500 + PATIENCE_MS, "a 500 ms budget took %" PRId64 " ms", waited);
    CHECK_MSG(fb == FENCE_SENTINEL, "fence_out was written on LOCK_TIMEOUT");
    CHECK_RC(lock_acquire(a, 1000, NULL), LOCK_ERR_ALREADY_HELD);

    CHECK_RC(lock_release(a, 0), LOCK_OK);
    CHECK_RC(lock_acquire(b, 1000, &fb), LOCK_OK);
    CHECK_MSG(fb > fa && fb != FENCE_SENTINEL, "fence %" PRIu64 " after %" PRIu64, fb, fa);
    CHECK_RC(lock_release(b, 0), LOCK_OK);
    CHECK_RC(lock_release(b, 0), LOCK_ERR_NOT_HELD);
    CLOSE(a);
    CLOSE(b);
    return true;
}

/* lock_prolong: LOCK_OK within the TTL (the spec's or the one given);
 * LOCK_EXPIRED once the server let the key expire and nobody took the lock,
 * which is then held again; LOCK_LOST once another handle took it, which
 * leaves the other's lock alone and this handle holding nothing. */
static bool test_prolong(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "prolong");
    lock_handle *h = NULL, *other = NULL;
    OPEN_NAMED(h, name, "ttl=30s");
    OPEN_NAMED(other, name, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    lock_info info;

    int64_t before = unix_ms();
    CHECK_RC(lock_prolong(h, 0), LOCK_OK); /* 0: the spec's ttl */
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    int64_t after = unix_ms();
    if (!expires_between(info.expires_unix_ms, before, after, 30000)) return false;
    CHECK_MSG(info.fence == fence, "prolong changed the fence from %" PRIu64 " to %" PRIu64, fence, info.fence);

    before = unix_ms();
    CHECK_RC(lock_prolong(h, 5000), LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    after = unix_ms();
    if (!expires_between(info.expires_unix_ms, before, after, 5000)) return false;

    /* past a 100 ms TTL the server drops the key: free, but nobody took it */
    CHECK_RC(lock_prolong(h, 100), LOCK_OK);
    sleep_ms(150);
    if (!wait_until_free(other)) return false;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.last_fence == fence, "the expired lock's last_fence is %" PRIu64 ", not %" PRIu64, info.last_fence,
              fence);
    before = unix_ms();
    CHECK_RC(lock_prolong(h, 60000), LOCK_EXPIRED);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    after = unix_ms();
    CHECK_MSG(info.held && info.held_by_this_handle && !info.stale && info.fence == fence,
              "after LOCK_EXPIRED from prolong: held %d, by this %d, stale %d, fence %" PRIu64 " (had %" PRIu64 ")",
              (int)info.held, (int)info.held_by_this_handle, (int)info.stale, info.fence, fence);
    if (!expires_between(info.expires_unix_ms, before, after, 60000)) return false;
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_RC(lock_release(h, 0), LOCK_OK);

    /* another handle takes the lock the server let go: LOCK_LOST */
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_RC(lock_prolong(h, 100), LOCK_OK);
    sleep_ms(150);
    if (!wait_until_free(other)) return false;
    uint64_t taken = 0;
    CHECK_RC(lock_try_acquire(other, &taken), LOCK_OK);
    CHECK_MSG(taken > fence, "fence %" PRIu64 " after the expired %" PRIu64, taken, fence);
    CHECK_RC(lock_prolong(h, 60000), LOCK_LOST);
    CHECK_RC(lock_prolong(h, 60000), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == taken && info.expires_unix_ms == 0,
              "the lost prolong disturbed the other's lock: by it %d, fence %" PRIu64 ", expires %" PRId64,
              (int)info.held_by_this_handle, info.fence, info.expires_unix_ms);
    CHECK_RC(lock_release(other, 0), LOCK_OK);

    /* without a TTL, prolong(0) makes the lock never expire */
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_prolong(other, 10000), LOCK_OK);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.expires_unix_ms != 0, "prolong(10000) left no expiry");
    CHECK_RC(lock_prolong(other, 0), LOCK_OK);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.expires_unix_ms == 0, "prolong(0) without a spec ttl left expiry %" PRId64, info.expires_unix_ms);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* lock_release: LOCK_OK within the TTL; LOCK_EXPIRED once the server let
 * the key expire and nobody took it (released all the same); LOCK_LOST
 * once another handle took it, leaving that one's lock alone. After each,
 * the handle holds nothing. */
static bool test_release_outcomes(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "release");
    lock_handle *h = NULL, *brief = NULL, *other = NULL;
    OPEN_NAMED(h, name, "ttl=30s");
    OPEN_NAMED(brief, name, "ttl=100ms");
    OPEN_NAMED(other, name, NULL);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    CHECK_MESSAGE("lock_release", &main_server, name, NULL);

    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(brief, &fence), LOCK_OK);
    sleep_ms(150);
    if (!wait_until_free(other)) return false;
    CHECK_RC(lock_release(brief, 0), LOCK_EXPIRED);
    CHECK_RC(lock_release(brief, 0), LOCK_ERR_NOT_HELD);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence == fence && info.cooldown_until_unix_ms == 0,
              "after LOCK_EXPIRED: held %d, last_fence %" PRIu64 ", cooldown %" PRId64, (int)info.held,
              info.last_fence, info.cooldown_until_unix_ms);

    CHECK_RC(lock_try_acquire(brief, &fence), LOCK_OK);
    sleep_ms(150);
    if (!wait_until_free(other)) return false;
    uint64_t taken = 0;
    CHECK_RC(lock_try_acquire(other, &taken), LOCK_OK);
    CHECK_MSG(taken > fence, "fence %" PRIu64 " after the expired %" PRIu64, taken, fence);
    CHECK_RC(lock_release(brief, 0), LOCK_LOST);
    CHECK_RC(lock_release(brief, 0), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && info.fence == taken && info.owner_pid == (int32_t)getpid(),
              "the lost release disturbed the other's lock: held %d, fence %" PRIu64 " (took %" PRIu64 ")",
              (int)info.held, info.fence, taken);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(brief);
    CLOSE(other);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Looking and breaking                                                     */
/* ------------------------------------------------------------------------ */

/* A child that waits for the lock `name` as long as it takes, then lets go. */
static bool child_waits(const char *name) {
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, NULL);
    CHECK_RC(lock_acquire(h, PATIENCE_MS, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

/* lock_inspect's fields from the holder and from another handle; the
 * queue counts the holder and a waiter; a release's cooldown closes the
 * lock to everyone until it ends. */
static bool test_inspect_and_cooldown(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "inspect");
    lock_handle *h = NULL, *other = NULL;
    OPEN_NAMED(h, name, "ttl=10s");
    OPEN_NAMED(other, name, NULL);
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
        int64_t looked = unix_ms();
        CHECK_RC(lock_inspect(viewer, &info), LOCK_OK);
        int64_t seen = unix_ms();
        CHECK_MSG(info.held, "view %d: not held", view);
        CHECK_MSG(info.held_by_this_handle == (view == 0), "view %d: held_by_this_handle is %d", view,
                  (int)info.held_by_this_handle);
        CHECK_MSG(!info.stale, "view %d: a fresh lock is stale", view);
        CHECK_MSG(info.owner_liveness == LOCK_OWNER_ALIVE, "view %d: owner_liveness %d", view,
                  (int)info.owner_liveness);
        CHECK_MSG(info.owner_pid == (int32_t)getpid(), "view %d: owner_pid %d, getpid() %d", view,
                  (int)info.owner_pid, (int)getpid());
        CHECK_MSG(memchr(info.owner_host, '\0', sizeof info.owner_host) != NULL, "owner_host is not terminated");
        CHECK_MSG(strcmp(info.owner_host, host) == 0, "view %d: owner_host \"%s\", gethostname \"%s\"", view,
                  info.owner_host, host);
        CHECK_MSG(info.fence == fence && info.last_fence == fence,
                  "view %d: fence %" PRIu64 ", last_fence %" PRIu64 ", acquired %" PRIu64, view, info.fence,
                  info.last_fence, fence);
        /* the server's own expiry: its time left, from the moment it was read */
        CHECK_MSG(info.expires_unix_ms > looked && info.expires_unix_ms <= seen + 10000 + 5 &&
                      info.expires_unix_ms >= before + 10000 - 5,
                  "view %d: expires_unix_ms %" PRId64 " is not 10 s after the acquisition in [%" PRId64
                  ", %" PRId64 "]",
                  view, info.expires_unix_ms, before, after);
        /* the moment the request left, in milliseconds cut, not rounded */
        CHECK_MSG(info.since_unix_ms >= before - 1 && info.since_unix_ms <= after,
                  "view %d: since_unix_ms %" PRId64 " is not in [%" PRId64 ", %" PRId64 "]", view,
                  info.since_unix_ms, before, after);
        CHECK_MSG(info.cooldown_until_unix_ms == 0, "view %d: a cooldown while held", view);
        CHECK_MSG(info.queue_length == 1, "view %d: queue_length %" PRIu32 " with only the holder", view,
                  info.queue_length);
    }

    /* a waiter in line counts too, until it has had its turn */
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(PATIENCE_MS / 1000 + 30);
        child_exit(child_waits(name));
    }
    uint32_t seen = 0;
    bool queued = wait_queue_length(other, 2, &seen);
    lock_result released = lock_release(h, 0);
    CHECK_CHILD_OK(pid);
    if (!queued) return false;
    CHECK_RC(released, LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.queue_length == 0 && info.last_fence > fence,
              "after the waiter's turn: held %d, queue_length %" PRIu32 ", last_fence %" PRIu64, (int)info.held,
              info.queue_length, info.last_fence);
    fence = info.last_fence;

    /* release with a cooldown: free but closed to everyone until it ends */
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    before = unix_ms();
    int64_t released_at = mono_ms();
    CHECK_RC(lock_release(h, 300), LOCK_OK);
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    after = unix_ms();
    CHECK_MSG(!info.held && info.owner_pid == 0 && info.fence == 0 && info.last_fence == fence &&
                  info.queue_length == 0 && info.since_unix_ms == 0 && info.expires_unix_ms == 0,
              "after release: held %d, owner_pid %d, fence %" PRIu64 ", last_fence %" PRIu64 ", queue_length %" PRIu32
              ", since_unix_ms %" PRId64,
              (int)info.held, (int)info.owner_pid, info.fence, info.last_fence, info.queue_length, info.since_unix_ms);
    CHECK_MSG(info.cooldown_until_unix_ms >= before + 300 - 5 && info.cooldown_until_unix_ms <= after + 300 + 5,
              "cooldown_until_unix_ms %" PRId64 " is not 300 ms after [%" PRId64 ", %" PRId64 "]",
              info.cooldown_until_unix_ms, before, after);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_MESSAGE("lock_try_acquire", &main_server, name, "cooling down until");
    CHECK_RC(lock_try_acquire(h, &probe), LOCK_BUSY); /* the releaser too */
    CHECK_MSG(probe == FENCE_SENTINEL, "fence_out written during the cooldown");
    uint64_t next = 0;
    CHECK_RC(lock_acquire(other, PATIENCE_MS, &next), LOCK_OK);
    int64_t waited = mono_ms() - released_at;
    CHECK_MSG(waited >= 290, "acquired %" PRId64 " ms into a 300 ms cooldown", waited);
    CHECK_MSG(next > fence, "fence %" PRIu64 " after %" PRIu64, next, fence);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.held_by_this_handle && info.cooldown_until_unix_ms == 0 && info.expires_unix_ms == 0,
              "after the cooldown: held %d, by this %d, cooldown_until %" PRId64 ", expires %" PRId64,
              (int)info.held, (int)info.held_by_this_handle, info.cooldown_until_unix_ms, info.expires_unix_ms);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* lock_break: removes a held lock and moves the fence on, so that its
 * holder's release and prolong answer LOCK_LOST, not LOCK_EXPIRED, even
 * when nobody took the lock since; on a free lock it reports was_held false. */
static bool test_break(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "break");
    lock_handle *a = NULL, *b = NULL;
    OPEN_NAMED(a, name, NULL);
    OPEN_NAMED(b, name, NULL);
    bool was_held = true;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(!was_held, "breaking a free lock reports was_held");
    uint64_t fa = 0, fb = 0;
    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    was_held = false;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(was_held, "breaking a held lock reports !was_held");
    lock_info info;
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence > fa, "after the break: held %d, last_fence %" PRIu64 " (broken %" PRIu64 ")",
              (int)info.held, info.last_fence, fa);
    uint64_t moved = info.last_fence;
    was_held = true;
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_MSG(!was_held, "the second break still found a lock");
    CHECK_RC(lock_release(a, 0), LOCK_LOST); /* broken, and nobody took it since */
    CHECK_RC(lock_release(a, 0), LOCK_ERR_NOT_HELD);

    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    CHECK_MSG(fa > moved, "fence %" PRIu64 " after the break's %" PRIu64, fa, moved);
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_RC(lock_try_acquire(b, &fb), LOCK_OK);
    CHECK_MSG(fb > fa, "fence %" PRIu64 " after the broken %" PRIu64, fb, fa);
    CHECK_RC(lock_release(a, 0), LOCK_LOST); /* broken, and taken */
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.fence == fb, "A's release disturbed B's lock");
    CHECK_RC(lock_release(b, 0), LOCK_OK);

    CHECK_RC(lock_try_acquire(a, &fa), LOCK_OK);
    CHECK_RC(lock_break(b, &was_held), LOCK_OK);
    CHECK_RC(lock_prolong(a, 60000), LOCK_LOST);
    CHECK_RC(lock_prolong(a, 60000), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_inspect(b, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.cooldown_until_unix_ms == 0, "after the lost prolong: held %d, cooldown %" PRId64,
              (int)info.held, info.cooldown_until_unix_ms);
    CLOSE(a);
    CLOSE(b);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Waiting: warnings, cancel, first come first served                      */
/* ------------------------------------------------------------------------ */

/* During the warning callback, lock_last_error_message() names the lock
 * (its server and name), the time waited and the holder. */
static bool test_warning_names_holder(void) {
    REQUIRE_SERVER();
    char name[128], me[64], lock[HARNESS_PATH_MAX + 256];
    new_name(name, sizeof name, "warning");
    held_by_me(me, sizeof me);
    format_into(lock, sizeof lock, "lock_acquire: %s%s: ", main_server.shown, name);
    lock_handle *holder = NULL, *waiter = NULL;
    OPEN_NAMED(holder, name, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);
    OPEN_NAMED(waiter, name, "wmin=50ms&wafter=50ms");
    struct warning_text text;
    memset(&text, 0, sizeof text);
    text.self = &text;
    CHECK_RC(lock_set_warning(waiter, keep_warning_text, &text), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 400, NULL), LOCK_TIMEOUT);
    CHECK_MESSAGE("lock_acquire", &main_server, name, me);
    CHECK_MSG(text.calls >= 1, "no warning during a 400 ms wait with wmin=50ms");
    CHECK_MSG(strncmp(text.first, lock, strlen(lock)) == 0, "the warning's text does not begin with \"%s\": \"%s\"",
              lock, text.first);
    CHECK_MSG(strstr(text.first, "waited ") != NULL, "the warning's text does not say how long: \"%s\"", text.first);
    CHECK_MSG(strstr(text.first, me) != NULL, "the warning's text does not name the holder (%s): \"%s\"", me,
              text.first);

    /* no warning, and no message, when nothing stands in the way: the
     * lock free and nobody in line (a place given up only once its wait's
     * deadline had passed, on a slow machine, may stay until its lease
     * runs out) */
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    uint32_t seen = 0;
    if (!wait_queue_length(holder, 0, &seen)) return false;
    text.calls = 0;
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_OK);
    char after[512];
    lock_last_error_message(after, sizeof after);
    CHECK_MSG(text.calls == 0 && after[0] == '\0', "a wait that succeeded at once: %d warnings, message \"%s\"",
              text.calls, after);
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(waiter);
    return true;
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

/* lock_set_cancel: a wait on the server is given up with LOCK_CANCELLED
 * soon after the callback answers true, long before its budget, and its
 * place in line with it; one that answers true at once ends the call
 * without an attempt. */
static bool test_cancel_wait(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "cancel");
    lock_handle *holder = NULL, *waiter = NULL, *third = NULL;
    OPEN_NAMED(holder, name, NULL);
    OPEN_NAMED(waiter, name, NULL);
    OPEN_NAMED(third, name, NULL);
    CHECK_RC(lock_try_acquire(holder, NULL), LOCK_OK);

    struct canceller c = {.self = &c, .cancel_at_ms = mono_ms() + 200, .calls = 0};
    CHECK_RC(lock_set_cancel(waiter, cancel_when_due, &c), LOCK_OK);
    uint64_t fence = FENCE_SENTINEL;
    int64_t start = mono_ms();
    CHECK_RC(lock_acquire(waiter, 60000, &fence), LOCK_CANCELLED);
    int64_t waited = mono_ms() - start;
    CHECK_MESSAGE("lock_acquire", &main_server, name, "cancelled");
    CHECK_MSG(waited >= 190, "cancelled after %" PRId64 " ms, before the callback said so", waited);
    CHECK_MSG(waited < PATIENCE_MS, "a wait cancelled at 200 ms of 60 s returned after %" PRId64 " ms", waited);
    CHECK_MSG(c.calls >= 2, "the callback was asked %d times in a 200 ms wait", c.calls);
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out was written on LOCK_CANCELLED");

    /* the cancelled waiter left the line: only the holder is counted, and
     * the next comer's one try (which, fair, takes the lock only when
     * nobody waits) gets it once it is free */
    lock_info info;
    CHECK_RC(lock_inspect(third, &info), LOCK_OK);
    CHECK_MSG(info.queue_length == 1, "after the cancel the queue is %" PRIu32 " long", info.queue_length);
    CHECK_RC(lock_release(holder, 0), LOCK_OK);
    CHECK_RC(lock_try_acquire(third, NULL), LOCK_OK);
    CHECK_RC(lock_release(third, 0), LOCK_OK);

    /* already true: no attempt, even on a free lock */
    c.cancel_at_ms = 0;
    c.calls = 0;
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_CANCELLED);
    CHECK_MSG(c.calls == 1, "a callback that answered true was asked %d times", c.calls);
    CHECK_RC(lock_inspect(third, &info), LOCK_OK);
    CHECK_MSG(!info.held, "a cancelled call took the lock");
    CHECK_RC(lock_set_cancel(waiter, NULL, NULL), LOCK_OK);
    CHECK_RC(lock_acquire(waiter, 1000, NULL), LOCK_OK);
    CHECK_RC(lock_release(waiter, 0), LOCK_OK);
    CLOSE(holder);
    CLOSE(waiter);
    CLOSE(third);
    return true;
}

#define QUEUERS 4

struct queue_log {
    int next;                 /* how many have had the lock */
    int order[QUEUERS];       /* order[k]: the child that had it k-th */
    uint64_t fences[QUEUERS]; /* fences[k]: its fence */
    int inside, overlaps;
};

static bool queuer(const char *name, int number, struct queue_log *log) {
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_acquire(h, PATIENCE_MS, &fence), LOCK_OK);
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

/* First come, first served (fair=1, the default): waiters that queued one
 * after another, each started once the queue showed the one before it,
 * get the lock in that order, one at a time, with increasing fences. */
static bool test_fifo(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "fifo");
    struct queue_log *log = mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK_MSG(log != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(log, 0, sizeof *log);
    lock_handle *holder = NULL, *observer = NULL;
    OPEN_NAMED(holder, name, NULL);
    OPEN_NAMED(observer, name, NULL);
    uint64_t holder_fence = 0;
    CHECK_RC(lock_try_acquire(holder, &holder_fence), LOCK_OK);

    pid_t pids[QUEUERS];
    int started = 0;
    bool queued = true;
    uint32_t seen = 0;
    for (int i = 0; i < QUEUERS && queued; i++) {
        pid_t pid = fork_child();
        if (pid < 0) break;
        if (pid == 0) {
            alarm(PATIENCE_MS / 1000 + 60);
            child_exit(queuer(name, i, log));
        }
        pids[started++] = pid;
        queued = wait_queue_length(observer, (uint32_t)(2 + i), &seen);
    }
    /* a try keeps no place in line, and takes none ahead of it */
    lock_result tried = lock_try_acquire(observer, NULL);
    lock_info while_queued;
    lock_result inspected = lock_inspect(observer, &while_queued);
    lock_result released = lock_release(holder, 0);
    int failed_children = 0;
    for (int i = 0; i < started; i++) {
        int status = wait_child(pids[i]);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
    }
    CHECK_MSG(started == QUEUERS, "only %d of %d children could be forked", started, QUEUERS);
    CHECK_MSG(queued, "child %d's request did not show in queue_length (%" PRIu32 ")", started - 1, seen);
    CHECK_RC(tried, LOCK_BUSY);
    CHECK_RC(inspected, LOCK_OK);
    CHECK_MSG(while_queued.held && while_queued.owner_pid == (int32_t)getpid() &&
                  while_queued.queue_length == 1 + QUEUERS,
              "with %d waiting: held %d by %d, queue_length %" PRIu32, QUEUERS, (int)while_queued.held,
              (int)while_queued.owner_pid, while_queued.queue_length);
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
    lock_info info;
    CHECK_RC(lock_inspect(observer, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.queue_length == 0, "at the end: held %d, queue_length %" PRIu32, (int)info.held,
              info.queue_length);
    munmap(log, sizeof *log);
    CLOSE(holder);
    CLOSE(observer);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Processes: fork, a killed holder, exit                                   */
/* ------------------------------------------------------------------------ */

/* In a child of fork(): every call on the parent's held handle answers
 * LOCK_ERR_FORKED, naming the call; another handle, whose connection the
 * parent opened, asks the server on one of its own and sees the parent
 * hold the lock. */
static bool forked_child(lock_handle *h, lock_handle *other, uint64_t parent_fence) {
    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_release(h, 0), LOCK_ERR_FORKED);
    char message[512];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(strncmp(message, "lock_release: ", 14) == 0, "LOCK_ERR_FORKED's message: \"%s\"", message);
    CHECK_RC(lock_prolong(h, 0), LOCK_ERR_FORKED);
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_FORKED);
    CHECK_RC(lock_acquire(h, 0, &fence), LOCK_ERR_FORKED);
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out written on LOCK_ERR_FORKED");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_FORKED);
    bool was_held = false;
    CHECK_RC(lock_break(h, &was_held), LOCK_ERR_FORKED);
    CHECK_RC(lock_autorenew(h, NULL, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_set_warning(h, NULL, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_set_cancel(h, NULL, NULL), LOCK_ERR_FORKED);
    char path[64];
    CHECK_RC(lock_path(h, path, sizeof path, NULL), LOCK_ERR_FORKED);
    CHECK_RC(lock_close(h), LOCK_OK); /* frees the child's copy, releases nothing */

    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && !info.held_by_this_handle && info.owner_pid == (int32_t)getppid() &&
                  info.fence == parent_fence,
              "the child sees: held %d, by this %d, pid %d (parent %d), fence %" PRIu64 " (parent's %" PRIu64 ")",
              (int)info.held, (int)info.held_by_this_handle, (int)info.owner_pid, (int)getppid(), info.fence,
              parent_fence);
    CHECK_RC(lock_try_acquire(other, &fence), LOCK_BUSY);
    CLOSE(other);
    return true;
}

/* A lock held at fork() stays the parent's: the child cannot release,
 * prolong or break it, and its exit() (autoclean) leaves it alone, saying
 * nothing; the parent's handles, and their connections, go on working. */
static bool test_fork_child_cannot_release(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "fork");
    lock_handle *h = NULL, *other = NULL;
    OPEN_NAMED(h, name, "ttl=1h");
    OPEN_NAMED(other, name, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK); /* other's connection is open at fork() */
    int errors[2];
    CHECK(pipe(errors) == 0);
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(errors[0]);
        if (dup2(errors[1], STDERR_FILENO) < 0) _exit(1);
        child_exit_normally(forked_child(h, other, fence));
    }
    close(errors[1]);
    CHECK_CHILD_OK(pid);
    char said[512];
    ssize_t n = read(errors[0], said, sizeof said - 1);
    close(errors[0]);
    said[n > 0 ? n : 0] = '\0';
    CHECK_MSG(n == 0, "the child wrote to stderr: \"%s\"", said);

    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.owner_pid == (int32_t)getpid() && info.fence == fence &&
                  info.cooldown_until_unix_ms == 0,
              "after the child the parent's lock changed: by this %d, pid %d, fence %" PRIu64,
              (int)info.held_by_this_handle, (int)info.owner_pid, info.fence);
    CHECK_RC(lock_prolong(h, 0), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* A child acquires through a handle that held nothing at fork time (but
 * whose connection the parent had opened): a new owner with its own pid,
 * excluded from and excluding the parent. */
static bool child_acquires(lock_handle *h, int report_fd, int go_fd) {
    uint64_t fence = 0;
    CHECK_RC(lock_acquire(h, PATIENCE_MS, &fence), LOCK_OK);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(info.held_by_this_handle && info.owner_pid == (int32_t)getpid() && info.fence == fence,
              "in the child: by this %d, owner_pid %d, getpid %d", (int)info.held_by_this_handle, (int)info.owner_pid,
              (int)getpid());
    CHECK(write_exact(report_fd, &fence, sizeof fence));
    char go;
    CHECK(read_exact(go_fd, &go, 1));
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

static bool test_fork_child_acquires_its_own(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "fork-own");
    lock_handle *h = NULL, *other = NULL;
    OPEN_NAMED(h, name, NULL);
    OPEN_NAMED(other, name, NULL);
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
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
    memset(&info, 0, sizeof info);
    if (reported) {
        parent_try = lock_try_acquire(h, NULL);
        other_try = lock_try_acquire(other, NULL);
        inspected = lock_inspect(h, &info);
        write_exact(go[1], "g", 1);
    }
    close(go[1]);
    close(report[0]);
    CHECK_CHILD_OK(pid);
    CHECK_MSG(reported, "the child did not report its acquisition");
    CHECK_MSG(parent_try == LOCK_BUSY && other_try == LOCK_BUSY,
              "while the child holds: the parent's copy of the handle got %s, another handle %s", rc_name(parent_try),
              rc_name(other_try));
    CHECK_MSG(inspected == LOCK_OK && info.held && !info.held_by_this_handle && info.owner_pid == (int32_t)pid &&
                  info.fence == child_fence,
              "inspect while the child holds: %s, by this %d, pid %d (child %ld), fence %" PRIu64
              " (child's %" PRIu64 ")",
              rc_name(inspected), (int)info.held_by_this_handle, (int)info.owner_pid, (long)pid, info.fence,
              child_fence);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    CHECK_MSG(fence > child_fence, "fence %" PRIu64 " after the child's %" PRIu64, fence, child_fence);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* A child that takes the lock and then waits for its end: SIGKILL, or a
 * byte on `wait_fd` that has it leave by _exit() (no autoclean). */
static bool child_holds(const char *name, const char *options, int report_fd, int wait_fd) {
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, options);
    uint64_t fence = 0;
    CHECK_RC(lock_acquire(h, PATIENCE_MS, &fence), LOCK_OK);
    CHECK(write_exact(report_fd, &fence, sizeof fence));
    char byte;
    ssize_t n;
    do {
        n = read(wait_fd, &byte, 1);
    } while (n < 0 && errno == EINTR);
    _exit(0);
}

/* A holder without a TTL that died without releasing (SIGKILL, or _exit())
 * is seen dead by the next comer on this host, which takes its lock at once
 * (stale=pid, the default); with stale=none the lock stays, which shows it
 * is dead-owner detection that frees it, and only a break takes it. */
static bool test_killed_holder(void) {
    REQUIRE_SERVER();
    static const struct {
        const char *options;
        bool by_kill; /* SIGKILL, else _exit() */
    } rounds[] = {{"stale=none", true}, {NULL, true}, {NULL, false}};
    for (size_t round = 0; round < sizeof rounds / sizeof rounds[0]; round++) {
        const char *options = rounds[round].options;
        bool breaks_dead = options == NULL;
        char name[128];
        new_name(name, sizeof name, "killed");
        int report[2], idle[2];
        CHECK(pipe(report) == 0 && pipe(idle) == 0);
        pid_t pid = fork_child();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(report[0]);
            close(idle[1]);
            child_exit(child_holds(name, options, report[1], idle[0]));
        }
        close(report[1]);
        close(idle[0]);
        uint64_t child_fence = 0;
        bool reported = read_exact(report[0], &child_fence, sizeof child_fence);
        close(report[0]);
        lock_handle *h = NULL;
        lock_result opened = open_on(&main_server, name, options, &h);
        lock_result busy = LOCK_ERR_PANIC;
        lock_info alive;
        memset(&alive, 0, sizeof alive);
        if (reported && opened == LOCK_OK) {
            busy = lock_try_acquire(h, NULL);
            lock_inspect(h, &alive);
        }
        if (rounds[round].by_kill) {
            kill(pid, SIGKILL);
        } else {
            write_exact(idle[1], "x", 1);
        }
        int status = wait_child(pid);
        close(idle[1]);
        CHECK_MSG(reported, "round %zu: the child did not acquire", round);
        CHECK_RC(opened, LOCK_OK);
        CHECK_RC(busy, LOCK_BUSY);
        CHECK_MSG(alive.held && !alive.stale && alive.owner_pid == (int32_t)pid &&
                      alive.owner_liveness == LOCK_OWNER_ALIVE && alive.expires_unix_ms == 0,
                  "round %zu: a live holder: held %d, stale %d, pid %d (child %ld), liveness %d, expires %" PRId64,
                  round, (int)alive.held, (int)alive.stale, (int)alive.owner_pid, (long)pid,
                  (int)alive.owner_liveness, alive.expires_unix_ms);
        if (rounds[round].by_kill) {
            CHECK_MSG(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                      "round %zu: the child was not killed", round);
        } else {
            CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "round %zu: the child did not _exit(0)", round);
        }

        lock_info info;
        CHECK_RC(lock_inspect(h, &info), LOCK_OK);
        CHECK_MSG(info.held && info.owner_pid == (int32_t)pid && info.owner_liveness == LOCK_OWNER_DEAD &&
                      info.stale == breaks_dead,
                  "round %zu: a dead holder: held %d, pid %d, liveness %d, stale %d", round, (int)info.held,
                  (int)info.owner_pid, (int)info.owner_liveness, (int)info.stale);
        uint64_t fence = FENCE_SENTINEL;
        if (!breaks_dead) {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_BUSY);
            bool was_held = false;
            CHECK_RC(lock_break(h, &was_held), LOCK_OK);
            CHECK(was_held);
        }
        CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK); /* one attempt */
        CHECK_MSG(fence > child_fence, "round %zu: fence %" PRIu64 " after the dead holder's %" PRIu64, round, fence,
                  child_fence);
        /* a dead holder broken by this acquisition is named; one an
         * operator broke before it is not */
        lock_info previous;
        CHECK_RC(lock_took_over(h, &previous), LOCK_OK);
        CHECK_MSG(previous.held == breaks_dead &&
                      (!breaks_dead || (previous.owner_pid == (int32_t)pid &&
                                        previous.owner_liveness == LOCK_OWNER_DEAD && previous.fence == child_fence)),
                  "round %zu: took over from: held %d, pid %d (child %ld), liveness %d", round, (int)previous.held,
                  (int)previous.owner_pid, (long)pid, (int)previous.owner_liveness);
        CHECK_RC(lock_release(h, 0), LOCK_OK);
        CLOSE(h);
    }
    return true;
}

/* Autoclean: a child that acquires and calls exit(0) without releasing
 * leaves the lock free. stale=none and ttl=1h, so that neither dead-owner
 * detection nor the server's expiry can explain it. */
static bool child_acquires_and_exits(const char *name) {
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, "ttl=1h&stale=none");
    CHECK_RC(lock_acquire(h, PATIENCE_MS, NULL), LOCK_OK);
    return true; /* no lock_release, no lock_close */
}

static bool test_autoclean_at_exit(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "autoclean");
    pid_t pid = fork_child();
    CHECK(pid >= 0);
    if (pid == 0) child_exit_normally(child_acquires_and_exits(name));
    CHECK_CHILD_OK(pid);
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, "ttl=1h&stale=none");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.last_fence > 0, "after the child's exit(0): held %d (pid %d), last_fence %" PRIu64,
              (int)info.held, (int)info.owner_pid, info.last_fence);
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);
    return true;
}

/* ------------------------------------------------------------------------ */
/* What a lock on a server cannot do, and the watchdog                      */
/* ------------------------------------------------------------------------ */

static void note_lost(void *context) {
    __atomic_store_n((int *)context, 1, __ATOMIC_SEQ_CST);
}

/* lock_autorenew keeps a lock of a short TTL held well past it; it needs
 * a TTL to renew. */
static bool test_autorenew_keeps_lock(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "autorenew");
    lock_handle *h = NULL, *other = NULL, *forever = NULL;
    OPEN_NAMED(h, name, "ttl=300ms");
    OPEN_NAMED(other, name, NULL);
    uint64_t fence = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
    int lost = 0;
    CHECK_RC(lock_autorenew(h, note_lost, &lost), LOCK_OK);
    sleep_ms(1000);
    uint64_t probe = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(other, &probe), LOCK_BUSY);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(info.held && info.fence == fence && info.expires_unix_ms > unix_ms(),
              "after 1 s of a 300 ms TTL renewed: held %d, fence %" PRIu64 ", expires %" PRId64, (int)info.held,
              info.fence, info.expires_unix_ms);
    CHECK_MSG(__atomic_load_n(&lost, __ATOMIC_SEQ_CST) == 0, "the watchdog reported the lock lost");
    CHECK_RC(lock_autorenew_stop(h), LOCK_OK);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    CLOSE(h);

    OPEN_NAMED(forever, name, NULL);
    CHECK_RC(lock_try_acquire(forever, NULL), LOCK_OK);
    CHECK_RC(lock_autorenew(forever, NULL, NULL), LOCK_ERR_UNSUPPORTED);
    /* lockffi refuses a watchdog before it asks the lock anything: its
     * message names the call and the refusal, not the lock */
    char message[512];
    lock_last_error_message(message, sizeof message);
    CHECK_MSG(strncmp(message, "lock_autorenew: ", 16) == 0, "LOCK_ERR_UNSUPPORTED's message: \"%s\"", message);
    CHECK_RC(lock_release(forever, 0), LOCK_OK);
    CLOSE(forever);
    CLOSE(other);
    return true;
}

/* lock_path: a lock on a server keeps no file of this host, so there is no
 * path to give. lockffi answers LOCK_ERR_UNSUPPORTED (whatever the buffer's
 * size, after the NULL check of `buf`, which every lock_path makes first),
 * writes neither the buffer nor *len_out, and names the lock by its server
 * and name. lock_commit, which renames a file of this host under the lock,
 * answers LOCK_ERR_UNSUPPORTED too, also while the lock is held. */
static bool test_no_path_and_no_commit(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "path");
    lock_handle *h = NULL;
    OPEN_NAMED(h, name, NULL);
    char buf[256];
    memset(buf, '#', sizeof buf);
    size_t len = 777;
    CHECK_RC(lock_path(h, buf, sizeof buf, &len), LOCK_ERR_UNSUPPORTED);
    CHECK_MESSAGE("lock_path", &main_server, name, NULL);
    CHECK_MSG(len == 777, "len_out was written (%zu) on LOCK_ERR_UNSUPPORTED", len);
    for (size_t i = 0; i < sizeof buf; i++) CHECK_MSG(buf[i] == '#', "byte %zu of the buffer was written", i);
    CHECK_RC(lock_path(h, buf, 0, &len), LOCK_ERR_UNSUPPORTED);
    CHECK_MSG(len == 777, "len_out was written (%zu) for a zero-length buffer", len);
    CHECK_RC(lock_path(h, NULL, 0, NULL), LOCK_ERR_UNSUPPORTED); /* measuring, as snprintf(NULL, 0) */
    CHECK_RC(lock_path(h, NULL, 1, NULL), LOCK_ERR_NULL_ARGUMENT);

    char temp[HARNESS_PATH_MAX], target[HARNESS_PATH_MAX];
    path_join(temp, sizeof temp, harness_root, "commit.new");
    path_join(target, sizeof target, harness_root, "commit.data");
    CHECK(write_text(temp, "new"));
    CHECK_RC(lock_try_acquire(h, NULL), LOCK_OK);
    CHECK_RC(lock_commit(h, temp, target), LOCK_ERR_UNSUPPORTED);
    CHECK_MESSAGE("lock_commit", &main_server, name, NULL);
    CHECK_MSG(path_exists(temp) && !path_exists(target), "a refused commit touched the files");
    CHECK_RC(lock_path(h, buf, sizeof buf, &len), LOCK_ERR_UNSUPPORTED);
    CHECK_RC(lock_release(h, 0), LOCK_OK);
    unlink(temp);
    CLOSE(h);
    return true;
}

/* ------------------------------------------------------------------------ */
/* A server that cannot be reached or refuses the login                     */
/* ------------------------------------------------------------------------ */

/* Every call that asks the server answers LOCK_ERR_SERVER_UNREACHABLE,
 * with errno set and a message naming the call, the socket and the name;
 * the calls that need nothing of it answer as for any lock. */
static bool unreachable_at(const char *socket_path, const char *tag, int expected_errno) {
    char encoded[HARNESS_PATH_MAX * 3], base[HARNESS_PATH_MAX * 3 + 16], name[128];
    percent_encode(socket_path, encoded, sizeof encoded);
    format_into(base, sizeof base, "redis://%s/", encoded);
    struct server nowhere;
    CHECK_MSG(server_at(&nowhere, base), "no server base: %s", base);
    new_name(name, sizeof name, tag);
    lock_handle *h = NULL;
    OPEN_ON(h, &nowhere, name, "ttl=10s");
    uint64_t fence = FENCE_SENTINEL;
    errno = 0;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_SERVER_UNREACHABLE);
    int seen_errno = errno;
    CHECK_MESSAGE("lock_try_acquire", &nowhere, name, "no connection to the server");
    CHECK_MSG(seen_errno == expected_errno, "errno is %d (%s), expected %d (%s)", seen_errno, strerror(seen_errno),
              expected_errno, strerror(expected_errno));
    CHECK_RC(lock_acquire(h, 1000, &fence), LOCK_ERR_SERVER_UNREACHABLE);
    CHECK_MESSAGE("lock_acquire", &nowhere, name, "no connection to the server");
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out was written without a server");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_SERVER_UNREACHABLE);
    CHECK_MESSAGE("lock_inspect", &nowhere, name, NULL);
    bool was_held = false;
    CHECK_RC(lock_break(h, &was_held), LOCK_ERR_SERVER_UNREACHABLE);
    CHECK_MESSAGE("lock_break", &nowhere, name, NULL);
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    CHECK_RC(lock_prolong(h, 0), LOCK_ERR_NOT_HELD);
    CLOSE(h);
    return true;
}

static bool test_unreachable(void) {
    char path[HARNESS_PATH_MAX];
    /* no socket at the path */
    path_join(path, sizeof path, harness_root, "nobody.sock");
    if (!unreachable_at(path, "no-socket", ENOENT)) return false;
    /* a socket nobody accepts on, as a server that crashed leaves behind */
    path_join(path, sizeof path, harness_root, "refusing.sock");
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_MSG(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    CHECK(strlen(path) < sizeof address.sun_path);
    memcpy(address.sun_path, path, strlen(path));
    bool bound = bind(fd, (struct sockaddr *)&address, sizeof address) == 0;
    int bind_errno = errno;
    bool ok = bound && unreachable_at(path, "refused", ECONNREFUSED);
    close(fd);
    unlink(path);
    CHECK_MSG(bound, "bind %s: %s", path, strerror(bind_errno));
    return ok;
}

/* A server that wants a password: none, or a wrong one, is
 * LOCK_ERR_SERVER_AUTH, with the server's words and without the password;
 * the right one works. */
static bool test_auth(void) {
    REQUIRE(&auth_server, "LOCKFFI_TEST_REDIS_AUTH_SPEC_BASE");
    CHECK_MSG(auth_password != NULL && auth_password[0] != '\0', "LOCKFFI_TEST_REDIS_PASSWORD is not set");
    char name[128];
    new_name(name, sizeof name, "auth");
    lock_handle *h = NULL;
    OPEN_ON(h, &auth_server, name, NULL);
    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_SERVER_AUTH);
    CHECK_MESSAGE("lock_try_acquire", &auth_server, name, "NOAUTH");
    CHECK_RC(lock_acquire(h, 1000, &fence), LOCK_ERR_SERVER_AUTH);
    CHECK_MESSAGE("lock_acquire", &auth_server, name, "refused the login");
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out was written on LOCK_ERR_SERVER_AUTH");
    lock_info info;
    CHECK_RC(lock_inspect(h, &info), LOCK_ERR_SERVER_AUTH);
    CHECK_MESSAGE("lock_inspect", &auth_server, name, NULL);
    CHECK_RC(lock_break(h, NULL), LOCK_ERR_SERVER_AUTH);
    CHECK_MESSAGE("lock_break", &auth_server, name, NULL);
    CLOSE(h);

    /* a spec with a password: "redis://:<password>@<host>/" */
    const char *host = auth_server.base + strlen("redis://");
    static const char wrong[] = "not-the-password-4711";
    for (int right = 0; right < 2; right++) {
        char encoded[256], base[HARNESS_PATH_MAX * 3];
        percent_encode(right ? auth_password : wrong, encoded, sizeof encoded);
        format_into(base, sizeof base, "redis://:%s@%s", encoded, host);
        struct server with_password;
        CHECK_MSG(server_at(&with_password, base), "no server base: %s", base);
        /* messages name the server without its login */
        memcpy(with_password.shown, auth_server.shown, sizeof with_password.shown);
        OPEN_ON(h, &with_password, name, NULL);
        if (!right) {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_SERVER_AUTH);
            CHECK_MESSAGE("lock_try_acquire", &auth_server, name, "WRONGPASS");
            char message[1024];
            lock_last_error_message(message, sizeof message);
            CHECK_MSG(strstr(message, wrong) == NULL, "the message shows the password: \"%s\"", message);
        } else {
            CHECK_RC(lock_try_acquire(h, &fence), LOCK_OK);
            CHECK_RC(lock_inspect(h, &info), LOCK_OK);
            CHECK_MSG(info.held_by_this_handle && info.fence == fence, "with the password: by this %d, fence %" PRIu64,
                      (int)info.held_by_this_handle, info.fence);
            CHECK_RC(lock_release(h, 0), LOCK_OK);
        }
        CLOSE(h);
    }
    return true;
}

/* replicas=N on a server that has no replica: the acquisition is given
 * back, and the call says how many acknowledged it. */
static bool test_replicas_not_acknowledged(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "replicas");
    lock_handle *h = NULL, *other = NULL;
    OPEN_NAMED(h, name, "replicas=1&ttl=1h");
    OPEN_NAMED(other, name, NULL);
    uint64_t fence = FENCE_SENTINEL;
    CHECK_RC(lock_try_acquire(h, &fence), LOCK_ERR_SERVER_NOT_REPLICATED);
    CHECK_MESSAGE("lock_try_acquire", &main_server, name, "0 of 1 replicas acknowledged");
    CHECK_RC(lock_acquire(h, 1000, &fence), LOCK_ERR_SERVER_NOT_REPLICATED);
    CHECK_MESSAGE("lock_acquire", &main_server, name, "0 of 1 replicas acknowledged");
    CHECK_MSG(fence == FENCE_SENTINEL, "fence_out was written on LOCK_ERR_SERVER_NOT_REPLICATED");
    CHECK_RC(lock_release(h, 0), LOCK_ERR_NOT_HELD);
    lock_info info;
    CHECK_RC(lock_inspect(other, &info), LOCK_OK);
    CHECK_MSG(!info.held && info.queue_length == 0, "after two refusals: held %d (pid %d), queue_length %" PRIu32,
              (int)info.held, (int)info.owner_pid, info.queue_length);
    CHECK_RC(lock_try_acquire(other, NULL), LOCK_OK);
    CHECK_RC(lock_release(other, 0), LOCK_OK);
    CLOSE(h);
    CLOSE(other);
    return true;
}

/* ------------------------------------------------------------------------ */
/* A budget of 0                                                            */
/* ------------------------------------------------------------------------ */

/* lock_acquire with a budget of 0 is one attempt, like lock_try_acquire,
 * answering LOCK_OK on a free lock and LOCK_TIMEOUT, naming the holder, on
 * a held one; and a lock the handle was not given is not taken in its
 * name on the server. Each round's answers are gathered first and the
 * handles closed before they are judged, so that a failure here leaves
 * nothing open for the cases after it. */
static bool zero_budget_round(lock_handle *a, lock_handle *b, char *why, size_t len) {
    char message[512];
    lock_info info;
    lock_result free_rc = lock_acquire(b, 0, NULL);
    lock_last_error_message(message, sizeof message);
    bool seen = lock_inspect(a, &info) == LOCK_OK;
    lock_result released = lock_release(b, 0);
    if (free_rc != LOCK_OK || released != LOCK_OK) {
        snprintf(why, len,
                 "on a free lock lock_acquire(b, 0) answered %s (\"%s\"), and b's release %s; the server then "
                 "showed the lock %s by pid %d",
                 rc_name(free_rc), message, rc_name(released), seen && info.held ? "held" : "free",
                 seen ? (int)info.owner_pid : 0);
        return false;
    }
    if (lock_try_acquire(a, NULL) != LOCK_OK) {
        snprintf(why, len, "a could not take the free lock");
        return false;
    }
    lock_result held_rc = lock_acquire(b, 0, NULL);
    lock_last_error_message(message, sizeof message);
    lock_release(a, 0);
    char me[64];
    held_by_me(me, sizeof me);
    if (held_rc != LOCK_TIMEOUT || strstr(message, me) == NULL) {
        snprintf(why, len, "on a lock a held, lock_acquire(b, 0) answered %s (\"%s\"), not LOCK_TIMEOUT naming %s",
                 rc_name(held_rc), message, me);
        return false;
    }
    return true;
}

static bool test_zero_budget_is_one_attempt(void) {
    REQUIRE_SERVER();
    char name[128];
    new_name(name, sizeof name, "zero");
    lock_handle *a = NULL, *b = NULL;
    OPEN_NAMED(a, name, NULL);
    OPEN_NAMED(b, name, NULL);
    char why[1024] = "";
    int round = 0;
    while (round < 5 && zero_budget_round(a, b, why, sizeof why)) round++;
    bool was_held = false;
    lock_result broken = lock_break(a, &was_held);
    lock_result closed_a = lock_close(a), closed_b = lock_close(b);
    CHECK_MSG(round == 5, "round %d: %s", round, why);
    CHECK_RC(broken, LOCK_OK);
    CHECK_RC(closed_a, LOCK_OK);
    CHECK_RC(closed_b, LOCK_OK);
    return true;
}

static const struct test_case CASES[] = {
    {"test_spec_errors", test_spec_errors},
    {"test_cycle_and_fences", test_cycle_and_fences},
    {"test_busy_and_timeout", test_busy_and_timeout},
    {"test_prolong", test_prolong},
    {"test_release_outcomes", test_release_outcomes},
    {"test_inspect_and_cooldown", test_inspect_and_cooldown},
    {"test_break", test_break},
    {"test_warning_names_holder", test_warning_names_holder},
    {"test_cancel_wait", test_cancel_wait},
    {"test_fifo", test_fifo},
    {"test_fork_child_cannot_release", test_fork_child_cannot_release},
    {"test_fork_child_acquires_its_own", test_fork_child_acquires_its_own},
    {"test_killed_holder", test_killed_holder},
    {"test_autoclean_at_exit", test_autoclean_at_exit},
    {"test_autorenew_keeps_lock", test_autorenew_keeps_lock},
    {"test_no_path_and_no_commit", test_no_path_and_no_commit},
    {"test_unreachable", test_unreachable},
    {"test_auth", test_auth},
    {"test_replicas_not_acknowledged", test_replicas_not_acknowledged},
    {"test_zero_budget_is_one_attempt", test_zero_budget_is_one_attempt},
};

int main(int argc, char **argv) {
    /* a child that was killed may be gone when the parent writes to it */
    signal(SIGPIPE, SIG_IGN);
    server_from_env(&main_server, "LOCKFFI_TEST_REDIS_SPEC_BASE");
    server_from_env(&tcp_server, "LOCKFFI_TEST_REDIS_TCP_SPEC_BASE");
    server_from_env(&auth_server, "LOCKFFI_TEST_REDIS_AUTH_SPEC_BASE");
    auth_password = getenv("LOCKFFI_TEST_REDIS_PASSWORD");
    return run_program("server", CASES, sizeof CASES / sizeof CASES[0], argc > 1 ? argv[1] : NULL, false);
}
