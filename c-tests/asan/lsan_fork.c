/*
 * lsan_fork.c: linked into the AddressSanitizer build of the C test
 * programs, and only there. It turns LeakSanitizer's check at exit off in a
 * child of fork() made while the parent had more than one thread; every
 * other AddressSanitizer check still runs in that child.
 *
 * Why: fork() copies the parent's memory but only the thread that called
 * it. LeakSanitizer finds live memory from the stacks, registers and
 * thread-locals of the threads it can stop, and in such a child the other
 * threads are gone, so whatever only they pointed to is reported as a direct
 * leak. LeakSanitizer says so itself: "Running thread N was not suspended.
 * False leaks are possible." Seen in api.c's fork cases: the churning
 * thread's lock_last_error_message buffer (lockffi's LAST_MESSAGE
 * thread-local) and glibc's record of its TLS destructor
 * (__cxa_thread_atexit_impl), and a watchdog thread that was still starting
 * when the parent forked (AsanThread::Init's pthread_getattr_np buffer).
 * The memory is the parent's, which frees it; the child has only a copy.
 *
 * A suppression file would not do: its patterns name functions on the
 * allocation's stack, and what makes these reports false is not where the
 * memory was allocated but that the thread holding it does not exist in the
 * child; a pattern broad enough to cover a thread caught at any point
 * (start_thread, the watchdog's loop) would also hide real leaks of those
 * threads in the parent.
 *
 * Still leak-checked: each program's own process, with its watchdogs,
 * thread-locals and exit handlers, and every child of a single-threaded
 * process that ends with exit() rather than _exit(): those of every case
 * but api.c's two that fork beside another thread.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The parent's thread count, read just before each fork(); the child keeps
 * the copy. -1 if it could not be read. */
static int threads_at_fork;
/* Set in a child whose parent had other threads (or an unknown number). */
static int forked_from_threads;

/* The Threads: line of /proc/self/status, without allocating: this runs
 * inside fork(). */
static int count_threads(void) {
    char status[8192];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, status, sizeof status - 1);
    close(fd);
    if (n <= 0) return -1;
    status[n] = '\0';
    const char *line = strstr(status, "\nThreads:");
    return line != NULL ? atoi(line + strlen("\nThreads:")) : -1;
}

static void before_fork(void) {
    threads_at_fork = count_threads();
}

static void in_child(void) {
    if (threads_at_fork != 1) forked_from_threads = 1;
}

__attribute__((constructor)) static void watch_forks(void) {
    pthread_atfork(before_fork, NULL, in_child);
}

/* LeakSanitizer's hook (sanitizer/lsan_interface.h), asked once, when the
 * process exits: a non-zero answer skips the leak check. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    return forked_from_threads;
}
