// libpq from the system (Debian: libpq-dev). Only SkyPostgres imports this module.
#include <libpq-fe.h>
