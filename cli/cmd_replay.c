/* eerl replay: not written yet (placeholder so the command table links; replaced by its issue). */
#include "cli.h"

int eerl_cmd_replay(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    eerl_cli_err("replay", "this command is not available in this build yet");
    return EERL_EXIT_FAIL;
}
