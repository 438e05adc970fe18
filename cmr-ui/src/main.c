/*
 * main.c - cmr-ui: the web UI (docs/UI.md). Thin: options, then the library (cmr/ui.h)
 * until SIGINT or SIGTERM.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmr/conf.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/program.h"
#include "cmr/ui.h"

static const cmr_cli_option_t options[] = {
    {"address", 0, "ui.address", "ADDR", "address to serve on (default 127.0.0.1)"},
    {"port", 'p', "ui.port", "PORT", "port to serve on; 0 = any free one (default 8480)"},
    {"ingest-url", 0, "ui.ingest_url", "URL", "cmr-ingest's HTTP API (default http://127.0.0.1:8470)"},
    {"web-root", 0, "ui.web_root", "DIR", "the front end's files (default: cmr-ui/web of the source tree)"},
    {"read-only", 0, "ui.read_only", NULL, "refuse every write (same as -X ui.writable=false)"},
    {0},
};

/* Every key cmr-ui accepts (docs/CONFIGURATION.md is generated from it: --help-keys). */
static const cmr_conf_key_t keys[] = {
    {"ui.address", "127.0.0.1",
     "address of the web UI: IPv4 or IPv6 literal, :: (dual stack), localhost; beyond loopback ui.token_file is "
     "required"},
    {"ui.port", "8480", "port of the web UI; 0 = any free port (logged as event=ui.listening port=N)"},
    {"ui.token_file", "",
     "a file (owner-only) holding the access token: every request carries it (Authorization: Bearer, or the cookie "
     "set by signing in at /login); required when the address is not loopback"},
    {"ui.web_root", NULL, "the front end's files (index.html, js/, css/ and node_modules/uplot)"},
    {"ui.ingest_url", "http://127.0.0.1:8470", "cmr-ingest's HTTP API, where traces, metrics and agents are read"},
    {"ui.ingest_token_file", "", "the access token of cmr-ingest's HTTP API, when it has one"},
    {"ui.ingest_timeout_ms", "30000", "how long a read from cmr-ingest may take"},
    {"ui.writable", "true",
     "the page may start, narrow and stop diagnoses and apply environments (as an operator would with cmr-config)"},
    {"ui.read_only", "false", "the same as ui.writable = false"},
    {"ui.threads", "8",
     "the HTTP server's threads (a read waiting for cmr-ingest holds one, and the connections it serves)"},
    {"ui.connections", "1100", "open connections at most (idle ones hold no thread)"},
    {"ui.timeout_s", "60", "an idle connection is closed after this"},
    {"config.timeout_ms", "30000", "how long a write waits to read cmr.config / cmr.diagnoses to their end"},
    {"config.transactional_id", "cmr-ui-apply-<random>",
     "the Kafka transactional id environments are applied with (all or nothing, as cmr-config apply)"},
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t cli = {
    .program = "cmr-ui",
    .synopsis = "[options] run",
    .summary = "The web UI: traces, call trees, flame graphs, metrics, agents, environments and diagnoses in a\n"
               "browser (docs/UI.md). Reads cmr-ingest's HTTP API and the cmr.config, cmr.diagnoses and\n"
               "cmr.diagnosis-trees topics; writes diagnoses and environments as cmr-config does.\n"
               "  run                 serve until SIGINT or SIGTERM",
    .options = options,
    .keys = keys,
};

static volatile sig_atomic_t stop_flag;

int main(int argc, char **argv)
{
    cmr_conf_t *conf;
    int first, rc = cmr_program_start(&cli, argc, argv, &conf, &first);
    if (rc != CMR_PROGRAM_RUN)
        return rc;
    if (first >= argc || strcmp(argv[first], "run") != 0 || first + 1 != argc) {
        fprintf(stderr, "cmr-ui: the command is run\nTry 'cmr-ui --help'.\n");
        cmr_conf_destroy(conf);
        return 2;
    }
    if (!strcmp(cmr_conf_get(conf, "ui.read_only", "false"), "true"))
        cmr_conf_set(conf, "ui.writable", "false", "--read-only");
    char err[1024];
    cmr_ui_t *ui = cmr_ui_start(conf, err, sizeof err);
    if (!ui) {
        fprintf(stderr, "cmr-ui: %s\n", err);
        cmr_conf_destroy(conf);
        return 1;
    }
    cmr_program_stop_on_signals(&stop_flag);
    while (!stop_flag)
        pause();
    cmr_ui_stop(ui);
    cmr_conf_destroy(conf);
    return cmr_kafka_process_end(0);
}
