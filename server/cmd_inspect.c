/* placeholder: replaced by the inspect command */
#include "server/cli.h"
int cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; return cli_fail("inspect", "not built yet"); }
