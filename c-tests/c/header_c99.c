/* The header must compile alone, as strict C99, with every warning an error. */
#include "lockffi.h"

int lockffi_header_compiles_as_c99(void);
int lockffi_header_compiles_as_c99(void) { return LOCK_OK; }
