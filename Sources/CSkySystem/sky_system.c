#define _GNU_SOURCE
#include "sky_system.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Each function has a Linux way, compiled on Linux only, and a portable way, compiled
// everywhere: what a system without Linux's calls runs (macOS), and what Linux runs too when
// SKY_SYSTEM_PORTABLE=1, so that the tests exercise the portable way on Linux.

#ifdef __linux__
#include <dirent.h>
#include <malloc.h>
#include <sched.h>
#include <sys/eventfd.h>

static int portable_forced = -1;
static pthread_once_t portable_once = PTHREAD_ONCE_INIT;

static void read_portable_setting(void) {
    const char *value = getenv("SKY_SYSTEM_PORTABLE");
    portable_forced = value != NULL && strcmp(value, "1") == 0;
}

int sky_system_portable(void) {
    pthread_once(&portable_once, read_portable_setting);
    return portable_forced;
}
#else
int sky_system_portable(void) { return 1; }
#endif

size_t sky_heap_in_use(void) {
#ifdef __linux__
    if (!sky_system_portable()) {
        struct mallinfo2 info = mallinfo2();
        return info.uordblks + info.hblkhd;
    }
#endif
    return 0;
}

int sky_set_process_cpus(int first, int count) {
#ifdef __linux__
    if (!sky_system_portable()) {
        long online = sysconf(_SC_NPROCESSORS_CONF);
        if (count <= 0) {
            first = 0;
            count = (int)online;
        }
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int cpu = first; cpu < first + count && cpu < CPU_SETSIZE; cpu++) CPU_SET(cpu, &set);
        DIR *tasks = opendir("/proc/self/task");
        if (!tasks) return errno;
        int result = 0;
        struct dirent *entry;
        while ((entry = readdir(tasks)) != NULL) {
            pid_t tid = (pid_t)atoi(entry->d_name);
            // A thread that ended since the directory was read (ESRCH) needs nothing.
            if (tid > 0 && sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH) result = errno;
        }
        closedir(tasks);
        return result;
    }
#endif
    (void)first;
    (void)count;
    return ENOSYS;
}

void sky_release_free_memory(void) {
#ifdef __linux__
    if (!sky_system_portable()) malloc_trim(0);
#endif
}

void sky_fix_mmap_threshold(size_t bytes) {
#ifdef __linux__
    // A fixed threshold also stops glibc from raising it after large frees, which would put
    // later large blocks on the heap, where freeing them does not return them to the system.
    if (!sky_system_portable()) mallopt(M_MMAP_THRESHOLD, (int)bytes);
#else
    (void)bytes;
#endif
}

int sky_wake_eventfd(void) {
#ifdef __linux__
    if (!sky_system_portable()) return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
#endif
    errno = ENOSYS;
    return -1;
}

void sky_name_this_thread(const char *name) {
    char kept[16];
    strncpy(kept, name, sizeof kept - 1);
    kept[sizeof kept - 1] = '\0';
    // Named in the portable way too: macOS names the calling thread with a call of its own.
#if defined(__APPLE__)
    (void)pthread_setname_np(kept);
#elif defined(__linux__)
    (void)pthread_setname_np(pthread_self(), kept);
#endif
}

unsigned long sky_current_thread_id(void) {
    return (unsigned long)pthread_self();
}

int sky_set_batch_scheduling(int batch) {
#ifdef __linux__
    if (!sky_system_portable()) {
        struct sched_param parameters = {0};
        return sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &parameters) == 0 ? 0 : errno;
    }
#endif
    (void)batch;
    return ENOSYS;
}

int sky_kernel_thread_id(void) {
#ifdef __linux__
    if (!sky_system_portable()) return (int)gettid();
#endif
    return -1;
}
