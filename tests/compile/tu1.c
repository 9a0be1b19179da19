/* A user unit: inline fast paths only. */
#include "rdmax.h"
int tu1_send(rdmax_ep *ep, const void *b, size_t n) { return rdmax_send(ep, b, n, NULL, NULL); }
