/* libFuzzer target: eerld's policy file parser (programs/eerld/policy.c, through libinih) on
 * arbitrary bytes. An accepted policy must be self-consistent: floor <= ceiling on every GPU
 * and limits at least 1. */
#include <stdint.h>
#include <stdlib.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct eerld_policy p;
    char why[512];
    unsigned g, f, c;

    if (size > 65536)
        return 0;
    if (eerld_policy_parse((const char *)data, size, &p, why, sizeof(why)) < 0)
        return 0;
    if (p.max_connections < 1 || p.max_connections_per_user < 1)
        abort();
    for (g = 0; g < EERLD_POLICY_GPUS_MAX; g++) {
        eerld_policy_bounds(&p, g, &f, &c);
        if (f && c && f > c)
            abort();
    }
    return 0;
}
