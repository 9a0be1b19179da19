/* The implementation unit. */
#define RDMAX_IMPLEMENTATION
#include "rdmax.h"
int tu1_send(rdmax_ep *ep, const void *b, size_t n);
const char *tu2_str(int s);
const char *cxx_str(int s);
int (*volatile keep)(rdmax_ep *, const void *, size_t) = tu1_send;
int main(void) { return tu2_str(0) && cxx_str(0) && keep ? 0 : 1; }
