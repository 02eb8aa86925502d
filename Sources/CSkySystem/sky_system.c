#define _GNU_SOURCE
#include "sky_system.h"
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t sky_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}

int sky_set_process_cpus(int first, int count) {
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

void sky_release_free_memory(void) {
    malloc_trim(0);
}

void sky_fix_mmap_threshold(size_t bytes) {
    // A fixed threshold also stops glibc from raising it after large frees, which would put
    // later large blocks on the heap, where freeing them does not return them to the system.
    mallopt(M_MMAP_THRESHOLD, (int)bytes);
}

#ifdef __linux__
#include <sys/eventfd.h>
int sky_wake_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
#else
#include <errno.h>
int sky_wake_eventfd(void) {
    errno = ENOSYS;
    return -1;
}
#endif

void sky_name_this_thread(const char *name) {
    char kept[16];
    strncpy(kept, name, sizeof kept - 1);
    kept[sizeof kept - 1] = '\0';
    (void)pthread_setname_np(pthread_self(), kept);
}

unsigned long sky_current_thread_id(void) {
    return (unsigned long)pthread_self();
}

int sky_set_batch_scheduling(int batch) {
    struct sched_param parameters = {0};
    return sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &parameters) == 0 ? 0 : errno;
}

int sky_kernel_thread_id(void) {
    return (int)gettid();
}
