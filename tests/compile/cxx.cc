// A C++ unit includes the same header.
#include "rdmax.h"
extern "C" const char *cxx_str(int s) { return rdmax_status_str(static_cast<rdmax_status>(s)); }
int cxx_progress(rdmax_ctx *c) { return rdmax_progress(c); }
