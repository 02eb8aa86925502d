/* Preloaded into Swift programs run under valgrind 3.19 (Debian 12): by `skybench --instructions`
 * and `./ops/sky test --memcheck`.
 * libdispatch calls sigsuspend() with a signal mask that lives in read-only memory; valgrind's
 * wrapper of the system call writes to that mask and dies of SIGSEGV ("the 'impossible'
 * happened") before the program does anything. This sigsuspend passes a copy instead. */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
