/*
 * The header must compile as strict C89 (-std=c89 -pedantic), with every
 * warning an error: no // comment, no comma after an enum's last member,
 * and bool and uint64_t from <stdbool.h> and <stdint.h>, which gcc gives
 * in every language mode. A few of its declarations in use.
 */
#include "lockffi.h"

int lockffi_header_compiles_as_c89(const char *spec);
int lockffi_header_compiles_as_c89(const char *spec) {
    lock_handle *lock = NULL;
    lock_info info;
    uint64_t fence = 0;
    bool was_held = false;
    char path[LOCK_HOST_CAPACITY];
    size_t path_len = 0;
    lock_result rc = lock_open(spec, &lock);

    if (rc != LOCK_OK) {
        return (int)lock_last_error_message(NULL, 0);
    }
    rc = lock_acquire(lock, LOCK_WAIT_FOREVER, &fence);
    if (rc == LOCK_OK) {
        rc = lock_inspect(lock, &info);
        if (rc == LOCK_OK && info.owner_liveness == LOCK_OWNER_ALIVE && info.fence == fence) {
            rc = lock_release(lock, 0);
        }
    }
    if (lock_break(lock, &was_held) == LOCK_OK && was_held) {
        rc = LOCK_LOST;
    }
    if (lock_path(lock, path, sizeof path, &path_len) == LOCK_ERR_BUFFER_TOO_SMALL) {
        rc = LOCK_ERR_BUFFER_TOO_SMALL;
    }
    lock_close(lock);
    return lock_strerror(rc)[0] != '\0' && lock_version()[0] != '\0';
}
