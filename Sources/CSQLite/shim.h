// SQLite from the system (Debian: libsqlite3-dev). Only SkyJournal imports this module.
#include <sqlite3.h>
