/*
 * cp_register_burst.c - a fleet's JVMs starting at once, from cmr-config's side: N scripted
 * agents (each with its own producer and command topic, as the agent has) send their
 * AgentRegistration together, through the embedded broker, to one cmr-config; each is
 * timed until its answer (AgentConfiguration or NoEnvironment) is on its command topic.
 * Prints count, median, p90, p99 and max. A rolling restart of a cluster or an autoscaler
 * that starts many JVMs at once registers this way.
 *
 * Usage: cp_register_burst CMR-BROKER CMR-CONFIG [AGENTS]     (default 50)
 * CP_LOG_LEVEL sets cmr-config's log level; CP_KEEP=1 keeps its log (the path is printed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_proc.h"
#include "cmr/clock.h"
#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "cp_support.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Registers every peer, then polls them in turn until each has its answer or 60 s passed;
 * fills lat_us with the answered peers' latencies and returns how many. */
static size_t burst(cp_peer_t *peers, size_t n, int64_t *lat_us)
{
    int64_t *at = calloc(n, sizeof *at);
    char *done = calloc(n, 1);
    size_t answered = 0;
    if (!at || !done)
        goto out;
    for (size_t i = 0; i < n; i++) {
        at[i] = cmr_mono_ns() / 1000;
        cp_peer_register_queued(&peers[i], 1);
    }
    for (size_t i = 0; i < n; i++) /* each peer's producer sends on its own thread meanwhile */
        cp_peer_flush(&peers[i]);
    if (n > 1)
        printf("registrations sent and delivered in %.1f ms\n", (cmr_mono_ns() / 1000 - at[0]) / 1000.0);
    int64_t deadline = cmr_mono_ms() + 60000;
    while (answered < n && cmr_mono_ms() < deadline)
        for (size_t i = 0; i < n; i++) {
            cmr_msg_t m;
            if (done[i] || cp_peer_next(&peers[i], 0, &m) != 1)
                continue;
            if (m.type == CMR_MSG_AGENT_CONFIGURATION || m.type == CMR_MSG_NO_ENVIRONMENT) {
                lat_us[answered++] = cmr_mono_ns() / 1000 - at[i];
                done[i] = 1;
            }
            cmr_msg_free(&m);
        }
out:
    free(at);
    free(done);
    return answered;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CMR-BROKER CMR-CONFIG [AGENTS]\n", argv[0]);
        return 2;
    }
    size_t n = argc > 3 ? (size_t)atol(argv[3]) : 50;
    if (n == 0 || n > 1000) {
        fprintf(stderr, "AGENTS must be 1 .. 1000\n");
        return 2;
    }
    cmr_log_set_level(CMR_LOG_ERROR);
    char tmp[256], log[300];
    broker_proc_t broker;
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(argv[2], tmp) != 0 ||
        broker_proc_start(&broker, argv[1], NULL) != 0)
        return 1;
    cp_fmt(log, sizeof log, "%s/config.log", tmp);
    const char *env = "version: 1\nenvironments:\n  - id: burst\n    sensors:\n"
                      "      - {sensor: timer, class: \"app.*\", method: \"*\"}\n"
                      "mappings:\n  - {agent: \"burst-*\", address: 10.0.0.0/8, environment: burst}\n";
    char *out = NULL;
    if (cp_apply(argv[2], broker.bootstrap, env, &out) != 0) {
        fprintf(stderr, "cmr-config apply failed: %s\n", out ? out : "");
        broker_proc_stop(&broker);
        return 1;
    }
    free(out);
    cp_proc_t cfg;
    const char *run[] = {"run", NULL};
    if (cp_bench_worker_start(&cfg, argv[2], broker.bootstrap, run, log) != 0 ||
        cp_proc_wait_log(&cfg, "event=kafka.partitions_assigned", 30000) != 0) {
        fprintf(stderr, "cmr-config did not start\n");
        cp_proc_dump_log(&cfg, 20);
        cp_proc_stop(&cfg);
        broker_proc_stop(&broker);
        return 1;
    }
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "bench");
    cmr_conf_set(conf, "kafka.linger.ms", "0", "bench");
    cmr_conf_set(conf, "kafka.fetch.wait.max.ms", "5", "bench");
    cp_peer_t *peers = calloc(n + 1, sizeof *peers);
    int64_t *lat = calloc(n + 1, sizeof *lat);
    size_t opened = 0;
    while (peers && lat && opened <= n) {
        char name[64];
        cp_fmt(name, sizeof name, "burst-%zu", opened);
        if (cp_peer_open(&peers[opened], conf, name, "host", "10.0.0.1") != 0)
            break;
        opened++;
    }
    /* each peer's producer knows cmr.registrations (as the agent fetches it at start: its
     * first send would wait for librdkafka's metadata refresh, about 1 s), and the peers'
     * command consumers join their groups (about 3 s on the embedded broker), before
     * anything is timed: the figure is cmr-config's, not the peers' start-up */
    for (size_t i = 0; opened == n + 1 && i <= n; i++)
        cmr_producer_fetch_metadata(peers[i].producer, cmr_topic_name(CMR_TOPIC_REGISTRATIONS), 5000);
    for (int64_t until = cmr_mono_ms() + 8000; opened == n + 1 && cmr_mono_ms() < until;)
        for (size_t i = 0; i <= n; i++) {
            cmr_msg_t m;
            if (cp_peer_next(&peers[i], 0, &m) == 1)
                cmr_msg_free(&m);
        }
    int rc = 1;
    /* one agent first: cmr-config's producer, its metadata and the broker warm up */
    if (opened == n + 1 && burst(&peers[n], 1, lat) == 1) {
        size_t got = burst(peers, n, lat);
        qsort(lat, got, sizeof *lat, cmp_i64);
        printf("agents registering at once: %zu, answered: %zu\n", n, got);
        if (got)
            printf("AgentRegistration -> answer latency: median %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                   lat[got / 2] / 1000.0, lat[got * 90 / 100] / 1000.0, lat[got * 99 / 100] / 1000.0,
                   lat[got - 1] / 1000.0);
        rc = got == n ? 0 : 1;
    } else {
        fprintf(stderr, "set-up failed: %zu of %zu agents opened\n", opened, n + 1);
        cp_proc_dump_log(&cfg, 20);
    }
    for (size_t i = 0; i < opened; i++)
        cp_peer_close(&peers[i]);
    free(peers);
    free(lat);
    cp_proc_stop(&cfg);
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    if (getenv("CP_KEEP"))
        fprintf(stderr, "cmr-config log: %s\n", log);
    else
        cp_rmrf(tmp);
    return rc;
}
