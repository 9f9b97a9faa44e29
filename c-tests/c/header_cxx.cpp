// The header must compile alone as C++, with every warning an error.
#include "lockffi.h"

int lockffi_header_compiles_as_cxx();
int lockffi_header_compiles_as_cxx() { return LOCK_OK; }
