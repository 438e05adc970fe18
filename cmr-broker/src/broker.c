/*
 * broker.c - the embedded broker: librdkafka's mock cluster plus the project's topics.
 *
 * The mock cluster listens on ports the kernel picks. When a fixed port is asked for, a
 * small relay listens there and forwards each connection to the first mock broker; the
 * metadata the cluster returns then points clients at the mock brokers directly, exactly
 * as a real cluster's bootstrap server would.
 */
#include "cmr/broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmr/log.h"
#include "cmr/topics.h"

#define RELAY_MAX_PAIRS 256
#define RELAY_BUF 65536

typedef struct relay_pair {
    int fd[2]; /* client, upstream; -1 when unused */
} relay_pair_t;

struct cmr_broker {
    rd_kafka_t *rk; /* the handle the mock cluster lives in */
    rd_kafka_mock_cluster_t *mcluster;
    char bootstrap[64];
    int count;
    /* fixed-port relay */
    int listen_fd;
    struct sockaddr_in upstream;
    pthread_t relay_thread;
    int relay_running;
    atomic_bool stop;
    relay_pair_t pairs[RELAY_MAX_PAIRS];
};

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

static int create_topics(cmr_broker_t *b, int partitions_override, char *errbuf, size_t errlen)
{
    for (int t = 0; t < CMR_TOPIC__COUNT; t++) {
        if (t == CMR_TOPIC_COMMANDS)
            continue; /* per agent, created when the agent appears */
        const cmr_topic_layout_t *l = cmr_topic_layout(t);
        int parts = partitions_override > 0 ? partitions_override : l->partitions;
        rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(b->mcluster, cmr_topic_name(t), parts, 1);
        if (err) {
            ERRF("cannot create topic %s: %s", cmr_topic_name(t), rd_kafka_err2str(err));
            return -1;
        }
    }
    return 0;
}

static void relay_close(relay_pair_t *p)
{
    for (int i = 0; i < 2; i++)
        if (p->fd[i] >= 0)
            close(p->fd[i]);
    p->fd[0] = p->fd[1] = -1;
}

static void relay_accept(cmr_broker_t *b)
{
    int c = accept(b->listen_fd, NULL, NULL);
    if (c < 0)
        return;
    relay_pair_t *slot = NULL;
    for (int i = 0; i < RELAY_MAX_PAIRS && !slot; i++)
        if (b->pairs[i].fd[0] < 0)
            slot = &b->pairs[i];
    int u = socket(AF_INET, SOCK_STREAM, 0);
    if (!slot || u < 0 || connect(u, (struct sockaddr *)&b->upstream, sizeof b->upstream) != 0) {
        cmr_log(CMR_LOG_WARN, "broker.relay_refused", "reason=\"%s\"", slot ? strerror(errno) : "too many connections");
        close(c);
        if (u >= 0)
            close(u);
        return;
    }
    slot->fd[0] = c;
    slot->fd[1] = u;
}

/* Moves what is readable on one side to the other. -1 when the pair is finished. */
static int relay_pump(int from, int to)
{
    char buf[RELAY_BUF];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return -1;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += w;
    }
    return 0;
}

static void *relay_main(void *arg)
{
    cmr_broker_t *b = arg;
    struct pollfd fds[1 + 2 * RELAY_MAX_PAIRS];
    while (!b->stop) {
        int n = 0;
        fds[n++] = (struct pollfd){.fd = b->listen_fd, .events = POLLIN};
        for (int i = 0; i < RELAY_MAX_PAIRS; i++)
            for (int s = 0; s < 2; s++)
                fds[n++] = (struct pollfd){.fd = b->pairs[i].fd[s], .events = POLLIN};
        if (poll(fds, (nfds_t)n, 200) <= 0)
            continue;
        if (fds[0].revents & POLLIN)
            relay_accept(b);
        for (int i = 0; i < RELAY_MAX_PAIRS; i++) {
            relay_pair_t *p = &b->pairs[i];
            for (int s = 0; s < 2 && p->fd[0] >= 0; s++) {
                short ev = fds[1 + 2 * i + s].revents;
                if (ev & (POLLIN | POLLHUP | POLLERR))
                    if (relay_pump(p->fd[s], p->fd[1 - s]) != 0)
                        relay_close(p);
            }
        }
    }
    return NULL;
}

static int relay_start(cmr_broker_t *b, int port, char *errbuf, size_t errlen)
{
    const char *first = rd_kafka_mock_cluster_bootstraps(b->mcluster);
    int up_port = 0;
    const char *colon = strrchr(first, ':');
    if (!colon || (up_port = atoi(colon + 1)) <= 0) {
        ERRF("unexpected mock bootstrap address %s", first);
        return -1;
    }
    b->upstream = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)up_port)};
    b->upstream.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    b->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(b->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (b->listen_fd < 0 || bind(b->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(b->listen_fd, 64) != 0) {
        ERRF("cannot listen on 127.0.0.1:%d: %s", port, strerror(errno));
        return -1;
    }
    for (int i = 0; i < RELAY_MAX_PAIRS; i++)
        b->pairs[i].fd[0] = b->pairs[i].fd[1] = -1;
    if (pthread_create(&b->relay_thread, NULL, relay_main, b) != 0) {
        ERRF("cannot start the relay thread");
        return -1;
    }
    b->relay_running = 1;
    snprintf(b->bootstrap, sizeof b->bootstrap, "127.0.0.1:%d", port);
    return 0;
}

cmr_broker_t *cmr_broker_start(const cmr_broker_options_t *opts, char *errbuf, size_t errlen)
{
    cmr_broker_options_t o = opts ? *opts : (cmr_broker_options_t){0};
    if (o.brokers <= 0)
        o.brokers = 1;
    if (o.brokers > 9 || o.port < 0 || o.port > 65535 || o.partitions < 0 || o.partitions > 1000) {
        ERRF("bad options: brokers 1..9, port 0..65535, partitions 0..1000");
        return NULL;
    }
    cmr_broker_t *b = calloc(1, sizeof *b);
    if (b)
        b->count = o.brokers;
    if (!b) {
        ERRF("out of memory");
        return NULL;
    }
    b->listen_fd = -1;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "client.id", "cmr-broker", err, sizeof err);
    /* This handle only hosts the cluster and never connects: silence its warning
     * about having no bootstrap servers. */
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    b->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!b->rk) {
        ERRF("cannot create the mock cluster's handle: %s", err);
        rd_kafka_conf_destroy(conf);
        free(b);
        return NULL;
    }
    b->mcluster = rd_kafka_mock_cluster_new(b->rk, o.brokers);
    if (!b->mcluster) {
        ERRF("cannot create the mock cluster");
        cmr_broker_stop(b);
        return NULL;
    }
    if (create_topics(b, o.partitions, errbuf, errlen) != 0) {
        cmr_broker_stop(b);
        return NULL;
    }
    if (o.port > 0) {
        if (relay_start(b, o.port, errbuf, errlen) != 0) {
            cmr_broker_stop(b);
            return NULL;
        }
    } else {
        /* The first broker is enough to bootstrap; clients learn the others. */
        const char *all = rd_kafka_mock_cluster_bootstraps(b->mcluster);
        size_t n = strcspn(all, ",");
        snprintf(b->bootstrap, sizeof b->bootstrap, "%.*s", (int)n, all);
    }
    cmr_log(CMR_LOG_INFO, "broker.started", "bootstrap=%s brokers=%d cluster=\"%s\"", b->bootstrap, o.brokers,
            rd_kafka_mock_cluster_bootstraps(b->mcluster));
    return b;
}

void cmr_broker_set_available(cmr_broker_t *b, int available)
{
    for (int id = 1; id <= b->count; id++) {
        rd_kafka_resp_err_t err =
            available ? rd_kafka_mock_broker_set_up(b->mcluster, id) : rd_kafka_mock_broker_set_down(b->mcluster, id);
        if (err)
            cmr_log(CMR_LOG_WARN, "broker.availability_failed", "broker=%d error=\"%s\"", id, rd_kafka_err2str(err));
    }
    cmr_log(CMR_LOG_INFO, available ? "broker.up" : "broker.down", "brokers=%d", b->count);
}

const char *cmr_broker_bootstrap(const cmr_broker_t *b)
{
    return b->bootstrap;
}

void cmr_broker_stop(cmr_broker_t *b)
{
    if (!b)
        return;
    b->stop = true;
    if (b->relay_running)
        pthread_join(b->relay_thread, NULL);
    for (int i = 0; b->relay_running && i < RELAY_MAX_PAIRS; i++)
        relay_close(&b->pairs[i]);
    if (b->listen_fd >= 0)
        close(b->listen_fd);
    if (b->mcluster)
        rd_kafka_mock_cluster_destroy(b->mcluster);
    if (b->rk)
        rd_kafka_destroy(b->rk);
    free(b);
}
