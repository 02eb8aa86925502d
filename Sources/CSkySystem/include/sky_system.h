#ifndef SKY_SYSTEM_H
#define SKY_SYSTEM_H
#include <stddef.h>

/// Bytes of heap in use by live allocations (glibc's mallinfo2 uordblks + hblkhd): memory the
/// process really holds, unlike RSS, which also counts freed memory the allocator keeps.
size_t sky_heap_in_use(void);

#endif
