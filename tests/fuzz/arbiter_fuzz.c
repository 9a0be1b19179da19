/* Fuzz target: the arbiter (rdmax's pending queue) against the reference model of tests/arbiter_test.c.
   The random test of that file runs with every choice taken from the fuzzer's input instead of its
   generator (-DARB_FUZZ): pushes to the tail and the head, schedule, desched, dispatch with per_group
   1..3, purge and destroy of groups, and inside callbacks pushes, purges and destroys of the group being
   dispatched and of others, re-pushes of the element in flight, and every callback result. After every
   step the arbiter must agree with the model: queue order per group, element counts, schedule states,
   round-robin fairness, no early return of a dispatch, no element run twice or lost; at the end every
   element has exactly one end. Elements and groups are freed where a transport would free them, so a
   touch of forgotten memory is an ASan report. */
#define ARB_FUZZ
/* prefetch hints with any number of groups, so the model checks them too (tests/arbiter_test.c runs its
   12 groups without, as rdmax does below RDMAX__ARB_HINT_MIN) */
#define RDMAX__ARB_HINT_MIN 0
/* the directed tests of that file, and helpers only they use, are not run here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../arbiter_test.c"
#define FUZZ_NAME "arbiter"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char name[256];
    snprintf(name, sizeof name, "fuzz/arbiter: %s: random_model", fz_input);
    tl_begin("%s", name);  /* also clears tl_where */
    g_fz_p = data;
    g_fz_n = size;
    g_steps = 1000000;
    test_random();
    return 0;
}
