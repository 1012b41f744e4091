/* placeholder: replaced by the synth command */
#include "server/cli.h"
int cmd_synth(int argc, char **argv) { (void)argc; (void)argv; return cli_fail("synth", "not built yet"); }
