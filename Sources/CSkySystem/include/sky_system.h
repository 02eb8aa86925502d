#ifndef SKY_SYSTEM_H
#define SKY_SYSTEM_H
#include <stddef.h>
#include <stdint.h>

// Every call here that only Linux has has a portable way beside it (sky_system.c): what a
// system without it runs, and what Linux runs too when SKY_SYSTEM_PORTABLE=1 is set, so that
// the tests run that way on Linux.

/// 1 when the portable ways are taken: on a system other than Linux, or with
/// SKY_SYSTEM_PORTABLE=1 in the environment (read once).
int sky_system_portable(void);

/// Bytes of heap in use by live allocations (glibc's mallinfo2 uordblks + hblkhd): memory the
/// process really holds, unlike RSS, which also counts freed memory the allocator keeps.
/// Portable: 0, unknown.
size_t sky_heap_in_use(void);

/// Restricts every thread of this process to CPUs first..<first+count (count 0: every CPU the
/// machine has). Threads and child processes created later inherit it. Returns 0, or an errno.
/// (CPU_SET and friends are C macros, out of Swift's reach.) Portable: ENOSYS.
int sky_set_process_cpus(int first, int count);

/// Returns free heap memory of every arena to the system (glibc's malloc_trim). Portable: nothing.
void sky_release_free_memory(void);

/// Allocations of at least `bytes` get their own mapping, returned to the system when freed.
/// Portable: nothing.
void sky_fix_mmap_threshold(size_t bytes);

/// A non-blocking, close-on-exec eventfd (Linux) for waking a thread that sleeps in poll;
/// -1 with errno set where there is none (portable: ENOSYS; the caller takes a pipe).
int sky_wake_eventfd(void);

/// Names the calling thread in the kernel (what top -H, perf and /proc show), cut to the 15
/// bytes Linux keeps. (pthread_setname_np is a GNU extension the Glibc module does not expose;
/// Foundation sets a Thread's name only on the object, or racily once started.) macOS has a call
/// of its own for it, so the portable way names the thread too.
void sky_name_this_thread(const char *name);

/// Puts the calling thread under SCHED_BATCH (`batch` != 0) or SCHED_OTHER, keeping its nice
/// value; returns 0 or an errno. Unprivileged: only real-time policies need a capability.
/// (SCHED_BATCH is a GNU extension the Glibc module does not expose.) Portable: ENOSYS, the
/// thread keeps its scheduling.
int sky_set_batch_scheduling(int batch);

/// The calling thread's kernel id (gettid): what /proc/self/task lists. Portable: -1.
int sky_kernel_thread_id(void);

/// The calling thread, as a number that no other live thread has (pthread_self, which is a
/// pointer on some systems and an integer on others).
unsigned long sky_current_thread_id(void);

/// (high × 2⁶⁴ + low) ÷ divisor, for high < divisor (so that the quotient fits 64 bits): one
/// `divq` on x86-64, where Swift's and C's 128-bit division call a library routine of about 25
/// instructions (`__udivti3`) plus the checks around it. Inline, so that Swift code inlines it.
static inline uint64_t sky_divide_wide(uint64_t high, uint64_t low, uint64_t divisor) {
#if defined(__x86_64__)
    uint64_t quotient, remainder;
    __asm__("divq %4" : "=a"(quotient), "=d"(remainder) : "a"(low), "d"(high), "rm"(divisor));
    (void)remainder;
    return quotient;
#else
    return (uint64_t)((((unsigned __int128)high << 64) | low) / divisor);
#endif
}

#endif
