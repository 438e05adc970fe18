/*
 * cp_latency.c - the CMR side of the class-load latency: ClassLoaded sent by a scripted
 * agent -> Redefine received by it, through the embedded broker and one cmr-instrumenter,
 * over a few thousand JDK classes (java.base, extracted with jimage), sent at a steady rate.
 * Prints count, median, p90, p99 and max. The JVM part (hook -> ClassLoaded, Redefine ->
 * RedefineClasses) is not included: it needs the agent.
 *
 * Usage: cp_latency CMR-BROKER CMR-CONFIG CMR-INSTRUMENTER [CLASSES [PER-SECOND]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_proc.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr/clock.h"
#include "cp_support.h"

static int64_t mono_us(void)
{
    return cmr_mono_ns() / 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct sent {
    int64_t at_us;
    int64_t latency_us; /* -1 until answered */
} sent_t;

static void drain(cp_peer_t *peer, const cp_classes_t *classes, sent_t *sent, size_t *answered, int timeout_ms)
{
    cmr_msg_t m;
    while (cp_peer_next(peer, timeout_ms, &m) == 1) {
        int64_t now = mono_us();
        if (m.type == CMR_MSG_REDEFINE) {
            for (size_t i = 0; i < classes->count; i++)
                if (sent[i].latency_us < 0 && sent[i].at_us &&
                    strcmp(classes->items[i].name, m.u.redefine.class_name) == 0) {
                    sent[i].latency_us = now - sent[i].at_us;
                    (*answered)++;
                    break;
                }
        }
        cmr_msg_free(&m);
        timeout_ms = 0;
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s CMR-BROKER CMR-CONFIG CMR-INSTRUMENTER [CLASSES [PER-SECOND]]\n", argv[0]);
        return 2;
    }
    size_t max = argc > 4 ? (size_t)atol(argv[4]) : 3000;
    int rate = argc > 5 ? atoi(argv[5]) : 500;
    cmr_log_set_level(CMR_LOG_ERROR);
    cp_classes_t classes;
    if (cp_jdk_classes("java.base", "java/", max, &classes) != 0 || classes.count == 0)
        return 1;
    char tmp[256], db[300], log[300];
    broker_proc_t broker;
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(argv[2], tmp) != 0 ||
        broker_proc_start(&broker, argv[1], NULL) != 0)
        return 1;
    cp_fmt(db, sizeof db, "%s/db", tmp);
    cp_fmt(log, sizeof log, "%s/instr.log", tmp);
    const char *env = "version: 1\nenvironments:\n  - id: bench\n    sensors:\n"
                      "      - {sensor: timer, class: \"*\", method: \"*\", trivial: true}\n";
    if (cp_apply(argv[2], broker.bootstrap, env, NULL) != 0)
        return 1;
    cp_proc_t w;
    const char *db_opt[] = {"--db", db, NULL};
    if (cp_bench_worker_start(&w, argv[3], broker.bootstrap, db_opt, log) != 0 ||
        cp_proc_wait_log(&w, "event=instr.partitions_assigned", 30000) != 0)
        return 1;
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "bench");
    cmr_conf_set(conf, "kafka.linger.ms", "0", "bench");
    cmr_conf_set(conf, "kafka.fetch.wait.max.ms", "5", "bench");
    cp_peer_t peer;
    if (cp_peer_open(&peer, conf, "bench-1", "host", "10.0.0.1") != 0)
        return 1;
    cp_fmt(peer.env_id, sizeof peer.env_id, "bench");
    peer.revision = 1;
    /* warm up before timing anything: the peer joins its command topic, its producer
     * gets its producer id and the topic metadata, the instrumenter answers once */
    cmr_msg_t m;
    int warm = 0;
    for (int tries = 0; tries < 3 && !warm; tries++) {
        cp_peer_send_class(&peer, classes.items[0].name, 99, classes.items[0].bytes, classes.items[0].len,
                           CMR_CLASS_LOADED, 0);
        cp_peer_flush(&peer);
        if (cp_peer_next(&peer, 5000, &m) == 1) {
            warm = 1;
            cmr_msg_free(&m);
        }
    }

    sent_t *sent = calloc(classes.count, sizeof *sent);
    size_t answered = 0;
    for (size_t i = 0; i < classes.count; i++)
        sent[i].latency_us = -1;
    int64_t start = mono_us(), interval = 1000000 / (rate > 0 ? rate : 1);
    for (size_t i = 0; i < classes.count; i++) {
        int64_t due = start + (int64_t)i * interval;
        while (mono_us() < due)
            drain(&peer, &classes, sent, &answered, 0);
        sent[i].at_us = mono_us();
        if (cp_peer_send_class(&peer, classes.items[i].name, 0, classes.items[i].bytes, classes.items[i].len,
                               CMR_CLASS_LOADED, 0) != 0)
            sent[i].at_us = 0;
    }
    int64_t quiet_until = mono_us() + 5000000;
    while (mono_us() < quiet_until) {
        size_t before = answered;
        drain(&peer, &classes, sent, &answered, 100);
        if (answered != before)
            quiet_until = mono_us() + 3000000;
    }
    int64_t *lat = calloc(answered ? answered : 1, sizeof *lat);
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < classes.count; i++) {
        bytes += classes.items[i].len;
        if (sent[i].latency_us >= 0)
            lat[n++] = sent[i].latency_us;
    }
    qsort(lat, n, sizeof *lat, cmp_i64);
    printf("classes sent: %zu (%zu KiB, java.base), at %d/s\n", classes.count, bytes / 1024, rate);
    printf("redefined: %zu (the others: excluded, no method with code, or refused)\n", n);
    if (n)
        printf("ClassLoaded -> Redefine latency: median %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
               lat[n / 2] / 1000.0, lat[n * 90 / 100] / 1000.0, lat[n * 99 / 100] / 1000.0, lat[n - 1] / 1000.0);
    free(lat);
    free(sent);
    cp_peer_close(&peer);
    cp_proc_stop(&w);
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    cp_classes_free(&classes);
    if (getenv("CP_KEEP"))
        fprintf(stderr, "instrumenter log: %s\n", log);
    else
        cp_rmrf(tmp);
    return n ? 0 : 1;
}
