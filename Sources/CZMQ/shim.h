#ifndef SKY_CZMQ_SHIM_H
#define SKY_CZMQ_SHIM_H
// The only C API Sky imports: libzmq from the system (Debian: libzmq3-dev, 4.3.x, no draft API).
#include <zmq.h>
#endif
