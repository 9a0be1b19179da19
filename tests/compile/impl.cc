// The implementation unit compiled as C++: the same object as impl.c, linked with C units.
#define RDMAX_IMPLEMENTATION
#include "rdmax.h"
extern "C" int tu1_send(rdmax_ep *ep, const void *b, size_t n);
extern "C" const char *tu2_str(int s);
extern "C" const char *cxx_str(int s);
static int (*volatile keep)(rdmax_ep *, const void *, size_t) = tu1_send;
int main() { return tu2_str(0) && cxx_str(0) && keep ? 0 : 1; }
