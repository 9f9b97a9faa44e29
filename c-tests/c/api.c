#include "lockffi.h"
#include <stdio.h>
int main(void) { printf("%s\n", lock_version()); return 0; }
