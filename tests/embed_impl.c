/* The implementation unit of tests/embed_test.c, with no option defined: what a program that vendors
   rdmax gets by default. Compiled on its own (also as C++) so that the test can
   read its symbol table and sections. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "rdmax.h"
