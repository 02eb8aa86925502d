// libxcrypt (Debian's libcrypt-dev, which libc6-dev depends on): bcrypt hashes for skyweb's
// --auth-file. Only skyweb imports this module.
#include <crypt.h>
