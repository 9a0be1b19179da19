/* No transport selected: must stop with an #error. */
#include "rdmax.h"
