/* rdmax_impl.h on its own must stop with an #error. */
#define RDMAX_TRANSPORT_RC
#include "rdmax_impl.h"
