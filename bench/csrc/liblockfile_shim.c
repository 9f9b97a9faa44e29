/* The liblockfile peer, as its users call it: one attempt at
 * lockfile_create (no retries, so no sleep), then lockfile_remove.
 * Compiled by build.rs only when <lockfile.h> is found. */
#include <lockfile.h>

/* 0 on success, else liblockfile's L_* code. */
int bench_liblockfile_create(const char *path) {
    return lockfile_create(path, 0, L_PID);
}

/* 0 on success, -1 with errno otherwise. */
int bench_liblockfile_remove(const char *path) {
    return lockfile_remove(path);
}
