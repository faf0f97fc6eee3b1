/* libFuzzer target: the eerld request parser (src/agent/protocol.c) on arbitrary bytes, as the
 * daemon calls it on each line a client sends. A request it accepts must encode and parse back
 * to the same request (the client library's encoder and the daemon's parser agree). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/tools/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eerl_agent_req r, r2;
    char why[256], buf[8192];
    uint64_t id = 0;
    int has_id = 0;
    size_t n;

    if (eerl_agent_parse_request((const char *)data, size, &r, &id, &has_id, why, sizeof(why)) < 0)
        return 0;
    if (eerl_agent_encode_request(&r, buf, sizeof(buf), &n) < 0)
        abort();
    if (n == 0 || buf[n - 1] != '\n')
        abort();
    if (eerl_agent_parse_request(buf, n - 1, &r2, NULL, NULL, why, sizeof(why)) < 0)
        abort();
    if (r.op != r2.op || r.has_id != r2.has_id || r.id != r2.id || r.n_gpus != r2.n_gpus ||
        memcmp(r.gpus, r2.gpus, r.n_gpus * sizeof(unsigned)) != 0 || r.min_mhz != r2.min_mhz ||
        r.max_mhz != r2.max_mhz || strcmp(r.pool, r2.pool) != 0 || r.phase != r2.phase ||
        memcmp(r.pool_mhz, r2.pool_mhz, sizeof(r.pool_mhz)) != 0 || r.version != r2.version ||
        strcmp(r.client, r2.client) != 0)
        abort();
    return 0;
}
