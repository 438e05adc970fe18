/*
 * agent_keys.c - cmr-agent-keys: prints the agent's configuration keys (agent_options.c's
 * table) as Markdown, for scripts/gen-docs.sh and tests/docs. The agent itself has no
 * command line, so this host tool stands in for its --help-keys.
 *
 *   cmr-agent-keys --help-keys
 */
#include <stdio.h>
#include <string.h>

#include "agent_options.h"

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help-keys") != 0) {
        fprintf(stderr, "Usage: cmr-agent-keys --help-keys\n");
        return 2;
    }
    cmr_agent_keys_markdown(stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}
