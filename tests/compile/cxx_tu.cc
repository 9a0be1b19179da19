// tu1.c and tu2.c as C++ units, for a C implementation unit linked with C++ callers.
#include "rdmax.h"
extern "C" int tu1_send(rdmax_ep *ep, const void *b, size_t n) { return rdmax_send(ep, b, n, NULL, NULL); }
extern "C" const char *tu2_str(int s) { return rdmax_status_str(static_cast<rdmax_status>(s)); }
#ifdef RDMAX_TRANSPORT_RC
int cxx_put(rdmax_ep *ep, const void *b, size_t n) { return rdmax_put(ep, b, n, NULL, 0, 0, NULL); }
#endif
