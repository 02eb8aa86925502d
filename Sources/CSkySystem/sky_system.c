#include "sky_system.h"
#include <malloc.h>

size_t sky_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}
