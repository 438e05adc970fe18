/*
 * cmr_wire.c - cmr-wire: look at and exercise the wire contracts.
 *
 *   cmr-wire list                      message types, topics and schema fingerprints
 *   cmr-wire versions                  every schema version this build reads: the current
 *                                      ones and the past ones of schemas/past/
 *   cmr-wire schema TYPE               the .avsc of a type and its canonical form
 *   cmr-wire sample TYPE [FILE]        write an encoded sample message
 *   cmr-wire decode [FILE...]          decode messages (files or stdin) to JSON lines
 *   cmr-wire roundtrip --bootstrap A   produce a sample of every type through Kafka,
 *                                      consume them in a consumer group, check each
 *                                      arrived intact on its topic with its key
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/program.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "msg_sample.h"

static const cmr_cli_option_t wire_options[] = {
    {"timeout-ms", 0, "wire.timeout_ms", "MS", "roundtrip: how long to wait for every message (default 30000)"},
    {0},
};
/* Every key cmr-wire accepts (docs/CONFIGURATION.md is generated from it: --help-keys). */
static const cmr_conf_key_t wire_keys[] = {
    {"wire.timeout_ms", "30000", NULL},
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t wire_cli = {
    .program = "cmr-wire",
    .synopsis = "[options] list | versions | schema TYPE | sample TYPE [FILE] | decode [FILE...] | roundtrip",
    .summary = "Inspects the Avro wire contracts of the CMR (schemas/*.avsc) and checks them\n"
               "end to end through a Kafka cluster (roundtrip needs --bootstrap).",
    .options = wire_options,
    .keys = wire_keys,
};

static int type_arg(const char *name)
{
    int t = cmr_msg_type_by_name(name);
    if (t < 0) {
        fprintf(stderr, "cmr-wire: unknown message type %s (see 'cmr-wire list')\n", name);
        return -1;
    }
    return t;
}

static const char *topic_label(cmr_msg_type_t t)
{
    cmr_topic_t topic = cmr_msg_topic(t);
    return topic == CMR_TOPIC_COMMANDS ? "cmr.cmd.<instance id>" : cmr_topic_name(topic);
}

static int cmd_list(void)
{
    printf("%-20s %-22s %s\n", "TYPE", "TOPIC", "FINGERPRINT (CRC-64-AVRO)");
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        printf("%-20s %-22s %016" PRIx64 "\n", cmr_msg_type_name(t), topic_label(t), cmr_msg_fingerprint(t));
    return 0;
}

static int cmd_versions(void)
{
    printf("%-20s %-16s %s\n", "TYPE", "FINGERPRINT", "VERSION");
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        printf("%-20s %016" PRIx64 " current\n", cmr_msg_type_name(t), cmr_msg_fingerprint(t));
    int rc = cmr_wire_past_init() == 0 ? 0 : 1;
    for (size_t i = 0; i < cmr_wire_past_count(); i++) {
        cmr_msg_type_t t;
        uint64_t fp;
        if (cmr_wire_past_version(i, &t, &fp) == 0)
            printf("%-20s %016" PRIx64 " past\n", cmr_msg_type_name(t), fp);
    }
    return rc;
}

static int cmd_schema(const char *name)
{
    int t = type_arg(name);
    if (t < 0)
        return 2;
    char *pcf = cmr_wire_canonical_form(cmr_msg_schema_json(t), NULL, 0);
    printf("%s\ncanonical: %s\nfingerprint: %016" PRIx64 "\n", cmr_msg_schema_json(t), pcf ? pcf : "?",
           cmr_msg_fingerprint(t));
    free(pcf);
    return 0;
}

static int cmd_sample(const char *name, const char *path)
{
    int t = type_arg(name);
    if (t < 0)
        return 2;
    cmr_msg_t m;
    cmr_msg_sample(t, &m);
    cmr_buf_t buf = {0};
    char err[256];
    int rc = 0;
    if (cmr_msg_encode(t, &m.u, &buf, err, sizeof err) != CMR_WIRE_OK) {
        fprintf(stderr, "cmr-wire: %s\n", err);
        rc = 1;
    } else {
        FILE *f = path ? fopen(path, "wb") : stdout;
        if (!f || fwrite(buf.data, 1, buf.len, f) != buf.len || (path && fclose(f) != 0)) {
            fprintf(stderr, "cmr-wire: cannot write %s\n", path ? path : "stdout");
            rc = 1;
        }
    }
    cmr_buf_free(&buf);
    cmr_msg_free(&m);
    return rc;
}

/* The whole stream, or NULL when memory ran out. The caller frees it. */
static uint8_t *read_all(FILE *f, size_t *len)
{
    cmr_buf_t b = {0};
    uint8_t chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
        cmr_buf_put(&b, chunk, r);
    *len = b.len;
    return (uint8_t *)cmr_buf_take(&b);
}

static int decode_one(const char *label, FILE *f)
{
    size_t len;
    uint8_t *data = read_all(f, &len);
    if (!data) {
        fprintf(stderr, "cmr-wire: %s: cannot read\n", label);
        return 1;
    }
    cmr_msg_t m;
    char err[256];
    int rc = 0;
    if (cmr_msg_decode(data, len, &m, err, sizeof err) != CMR_WIRE_OK) {
        fprintf(stderr, "cmr-wire: %s: rejected: %s\n", label, err);
        rc = 1;
    } else {
        char *json = cmr_msg_to_json(&m);
        printf("%s\n", json ? json : "{}");
        free(json);
        cmr_msg_free(&m);
    }
    free(data);
    return rc;
}

static int cmd_decode(int argc, char **argv)
{
    if (argc == 0)
        return decode_one("stdin", stdin);
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "cmr-wire: %s: cannot open\n", argv[i]);
            rc = 1;
            continue;
        }
        rc |= decode_one(argv[i], f);
        fclose(f);
    }
    return rc;
}

/* --- roundtrip through Kafka ------------------------------------------------------- */

typedef struct sent {
    cmr_buf_t bytes;
    char topic[CMR_TOPIC_NAME_MAX];
    char key[CMR_KEY_MAX];
    int received;
} sent_t;

static int cmd_roundtrip(const cmr_conf_t *conf)
{
    char err[512];
    int64_t timeout_ms;
    if (!cmr_conf_get(conf, "kafka.bootstrap.servers", NULL)) {
        fprintf(stderr, "cmr-wire: roundtrip needs --bootstrap HOST:PORT\n");
        return 2;
    }
    if (cmr_conf_get_int(conf, "wire.timeout_ms", 30000, 100, 3600000, &timeout_ms, err, sizeof err)) {
        fprintf(stderr, "cmr-wire: %s\n", err);
        return 2;
    }
    sent_t sent[CMR_MSG__COUNT] = {0};
    char cmd_topic[CMR_TOPIC_NAME_MAX];
    cmr_msg_t sample;
    cmr_msg_sample(CMR_MSG_AGENT_REGISTRATION, &sample);
    cmr_topic_command(sample.u.registration.instance_id, cmd_topic, sizeof cmd_topic);
    cmr_msg_free(&sample);
    if (cmr_admin_ensure_topic(conf, cmd_topic, 1, -1, 0, 10000, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-wire: %s\n", err);
        return 1;
    }

    cmr_producer_t *p = cmr_producer_new(conf, "cmr-wire", NULL, NULL, err, sizeof err);
    if (!p) {
        fprintf(stderr, "cmr-wire: %s\n", err);
        return 1;
    }
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        cmr_msg_sample(t, &sample);
        cmr_topic_t topic = cmr_msg_topic(t);
        snprintf(sent[t].topic, sizeof sent[t].topic, "%s",
                 topic == CMR_TOPIC_COMMANDS ? cmd_topic : cmr_topic_name(topic));
        size_t klen = cmr_msg_key(t, &sample.u, sent[t].key, sizeof sent[t].key);
        if (cmr_msg_encode(t, &sample.u, &sent[t].bytes, err, sizeof err) != CMR_WIRE_OK ||
            cmr_producer_send_raw(p, sent[t].topic, sent[t].key, klen, sent[t].bytes.data, sent[t].bytes.len, NULL) !=
                CMR_SEND_OK) {
            fprintf(stderr, "cmr-wire: cannot send %s: %s\n", cmr_msg_type_name(t), err);
            cmr_msg_free(&sample);
            cmr_producer_destroy(p, 1000);
            return 1;
        }
        cmr_msg_free(&sample);
    }
    if (cmr_producer_flush(p, (int)timeout_ms) != 0) {
        fprintf(stderr, "cmr-wire: not every message was delivered within %lld ms\n", (long long)timeout_ms);
        cmr_producer_destroy(p, 0);
        return 1;
    }
    cmr_producer_stats_t ps;
    cmr_producer_stats(p, &ps);
    cmr_producer_destroy(p, 1000);
    printf("produced %" PRIu64 " messages, %" PRIu64 " acknowledged by the cluster\n", ps.queued, ps.delivered);

    const char *topics[CMR_TOPIC__COUNT];
    size_t ntopics = 0;
    for (int t = 0; t < CMR_TOPIC__COUNT; t++)
        topics[ntopics++] = t == CMR_TOPIC_COMMANDS ? cmd_topic : cmr_topic_name(t);
    char group[64], rnd[17];
    uint8_t raw[8];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, rnd);
    snprintf(group, sizeof group, "cmr-wire-%s", rnd);
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, ntopics, NULL, NULL, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cmr-wire: %s\n", err);
        return 1;
    }
    int got = 0, wrong = 0;
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    while (got < CMR_MSG__COUNT && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) != 1)
            continue;
        sent_t *s = &sent[rec->msg.type];
        size_t len = rec->len;
        if (!s->received && len == s->bytes.len && memcmp(rec->payload, s->bytes.data, len) == 0) {
            int ok = strcmp(rec->topic, s->topic) == 0 && strcmp(rec->key, s->key) == 0;
            s->received = 1;
            got++;
            wrong += !ok;
            char *json = cmr_msg_to_json(&rec->msg);
            printf("%-4s %-18s topic=%s partition=%d offset=%lld key=%s\n     %s\n", ok ? "ok" : "BAD",
                   cmr_msg_type_name(rec->msg.type), rec->topic, rec->partition, (long long)rec->offset,
                   rec->key_len ? rec->key : "(none)", json ? json : "");
            free(json);
        }
        cmr_consumer_done(c, rec);
        cmr_record_free(rec);
    }
    cmr_consumer_close(c);
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        if (!sent[t].received)
            printf("MISSING %s on %s\n", cmr_msg_type_name(t), sent[t].topic);
        cmr_buf_free(&sent[t].bytes);
    }
    printf("roundtrip: %d of %d message types consumed intact, %d on a wrong topic or key\n", got, CMR_MSG__COUNT,
           wrong);
    return got == CMR_MSG__COUNT && wrong == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    cmr_conf_t *conf;
    int first, rc = cmr_program_start(&wire_cli, argc, argv, &conf, &first);
    if (rc != CMR_PROGRAM_RUN)
        return rc;
    const char *cmd = first < argc ? argv[first] : NULL;
    int nargs = argc - first - 1;
    char **args = argv + first + 1;
    if (!cmd) {
        cmr_cli_usage(&wire_cli, stderr);
        rc = 2;
    } else if (strcmp(cmd, "list") == 0 && nargs == 0) {
        rc = cmd_list();
    } else if (strcmp(cmd, "versions") == 0 && nargs == 0) {
        rc = cmd_versions();
    } else if (strcmp(cmd, "schema") == 0 && nargs == 1) {
        rc = cmd_schema(args[0]);
    } else if (strcmp(cmd, "sample") == 0 && (nargs == 1 || nargs == 2)) {
        rc = cmd_sample(args[0], nargs == 2 ? args[1] : NULL);
    } else if (strcmp(cmd, "decode") == 0) {
        rc = cmd_decode(nargs, args);
    } else if (strcmp(cmd, "roundtrip") == 0 && nargs == 0) {
        rc = cmd_roundtrip(conf);
    } else {
        fprintf(stderr, "cmr-wire: bad command or arguments: %s\nTry 'cmr-wire --help'.\n", cmd);
        rc = 2;
    }
    cmr_conf_destroy(conf);
    return cmr_kafka_process_end(rc);
}
