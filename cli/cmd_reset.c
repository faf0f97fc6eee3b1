/* eerl reset: asks eerld to return GPUs to the default governor. Root may reset any GPU (which
 * ends whoever's lease, and also clears a lock eerld did not make); others only GPUs their uid
 * holds. With no --gpus: every GPU (root), or every GPU the caller's uid holds. The Slurm epilog
 * example in dist/ runs it after each job. */
#include <stdio.h>
#include <string.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "cli.h"

#define CMD "reset"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl reset [--gpus LIST] [--socket PATH]\n\n"
            "Returns GPUs to the default clock governor through eerld. Root may reset any\n"
            "GPU; other users only GPUs they hold a lease on.\n\n"
            "options:\n"
            "  --gpus LIST     GPU indices like 0,1 or 0-3 (default: all you may reset)\n"
            "  --socket PATH   eerld's socket (default: $EERL_SOCKET, else %s)\n"
            "  --help          show this help\n"
            "  (--gpu, the earlier name, still works and is deprecated)\n",
            EERL_AGENT_DEFAULT_SOCKET);
}

int eerl_cmd_reset(int argc, char **argv)
{
    unsigned gpus[EERL_AGENT_GPUS_MAX];
    size_t n = 0, i;
    const char *sock = NULL;
    eerl_agent *a;
    int e, k;

    for (k = 1; k < argc; k++) {
        if ((!strcmp(argv[k], "--gpus") || !strcmp(argv[k], "--gpu")) && k + 1 < argc) {
            const char *o = argv[k];
            if (eerl_cli_parse_index_list(CMD, o, argv[++k], gpus, EERL_AGENT_GPUS_MAX, &n) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(argv[k], "--socket") && k + 1 < argc) {
            sock = argv[++k];
        } else if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else {
            eerl_cli_err(CMD, "unknown %s '%s'; valid options: --gpus LIST, --socket PATH, --help",
                         argv[k][0] == '-' ? "option" : "argument", argv[k]);
            return EERL_EXIT_USAGE;
        }
    }
    a = eerl_cli_connect_agent(CMD, sock);
    if (!a)
        return EERL_EXIT_FAIL;
    e = eerl_agent_reset(a, gpus, n);
    if (e < 0) {
        eerl_cli_err(CMD, "%s", eerl_agent_last_error(a));
        eerl_agent_free(a);
        return EERL_EXIT_FAIL;
    }
    if (n) {
        printf("reset GPU");
        for (i = 0; i < n; i++)
            printf("%s %u", i ? "," : "", gpus[i]);
        printf(" to the default governor\n");
    } else {
        printf("reset every GPU you may reset to the default governor\n");
    }
    eerl_agent_free(a);
    return EERL_EXIT_OK;
}
