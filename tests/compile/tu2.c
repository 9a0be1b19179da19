/* A second user unit: out-of-line API and, when RC is selected, put. */
#include "rdmax.h"
const char *tu2_str(int s) { return rdmax_status_str((rdmax_status)s); }
#ifdef RDMAX_TRANSPORT_RC
int tu2_put(rdmax_ep *ep, const void *b, size_t n) { return rdmax_put(ep, b, n, NULL, 0, 0, NULL); }
#endif
