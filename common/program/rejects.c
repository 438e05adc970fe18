/*
 * rejects.c - counters and rate-limited log lines for rejected messages. See
 * cmr/rejects.h.
 */
#include "cmr/rejects.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/log.h"
#include "cmr/map.h"

#define REJECT_LOG_PER_SECOND 5

typedef struct reject_entry {
    char *topic, *reason; /* owned */
    uint64_t count;
    uint64_t reported; /* count at the last summary */
} reject_entry_t;

static pthread_mutex_t rejects_lock = PTHREAD_MUTEX_INITIALIZER;
static cmr_map_t rejects; /* "topic\0reason" -> reject_entry_t* (never freed: lives as long as the program) */
static uint64_t rejects_all;
static cmr_log_limiter_t rejects_limiter;

/* The entry of (topic, reason), created if there is room; the "(other)" entry of the
 * reason otherwise (reasons are names in the code, so those are few). Called with the lock
 * held. */
static reject_entry_t *entry_for(const char *topic, const char *reason)
{
    char key[512];
    bool other = strcmp(topic, "(other)") == 0;
    int n = snprintf(key, sizeof key, "%s%c%s", topic, '\0', reason);
    if (n < 0 || (size_t)n >= sizeof key)
        return other ? NULL : entry_for("(other)", reason);
    if (!other && cmr_map_count(&rejects) >= CMR_REJECTS_MAX_KEYS && !cmr_map_has(&rejects, key, (size_t)n))
        return entry_for("(other)", reason);
    bool created;
    void **slot = cmr_map_get_slot(&rejects, key, (size_t)n, &created);
    if (!slot)
        return NULL;
    if (created) {
        reject_entry_t *e = calloc(1, sizeof *e);
        if (!e || !(e->topic = strdup(topic)) || !(e->reason = strdup(reason))) {
            if (e)
                free(e->topic);
            free(e);
            cmr_map_del(&rejects, key, (size_t)n, NULL);
            return NULL;
        }
        *slot = e;
    }
    return *slot;
}

void cmr_reject_count(const char *topic, const char *reason)
{
    pthread_mutex_lock(&rejects_lock);
    reject_entry_t *e = entry_for(topic ? topic : "(unknown)", reason);
    if (e)
        e->count++;
    rejects_all++;
    pthread_mutex_unlock(&rejects_lock);
}

void cmr_reject(const char *topic, const char *reason, int32_t partition, int64_t offset, const char *detail)
{
    topic = topic ? topic : "(unknown)";
    cmr_reject_count(topic, reason);
    unsigned long long suppressed = 0;
    if (cmr_log_allow(&rejects_limiter, REJECT_LOG_PER_SECOND, &suppressed)) {
        char t[256], d[512];
        cmr_log(CMR_LOG_WARN, "wire.message_rejected",
                "topic=\"%s\" partition=%d offset=%lld reason=%s detail=\"%s\" suppressed_before=%llu",
                cmr_log_escape(topic, t, sizeof t), (int)partition, (long long)offset, reason,
                cmr_log_escape(detail ? detail : "", d, sizeof d), suppressed);
    }
}

int cmr_reject_decode(const char *topic, int32_t partition, int64_t offset, const void *payload, size_t len,
                      cmr_msg_t *out)
{
    char why[256];
    cmr_wire_err_t rc = cmr_msg_decode(payload, len, out, why, sizeof why);
    if (rc == CMR_WIRE_OK)
        return 0;
    cmr_reject(topic, cmr_wire_err_name(rc), partition, offset, why);
    return -1;
}

uint64_t cmr_rejects_count(const char *topic, const char *reason)
{
    char key[512];
    int n = snprintf(key, sizeof key, "%s%c%s", topic, '\0', reason);
    uint64_t c = 0;
    pthread_mutex_lock(&rejects_lock);
    reject_entry_t *e = n > 0 && (size_t)n < sizeof key ? cmr_map_get(&rejects, key, (size_t)n) : NULL;
    if (e)
        c = e->count;
    pthread_mutex_unlock(&rejects_lock);
    return c;
}

uint64_t cmr_rejects_total(void)
{
    pthread_mutex_lock(&rejects_lock);
    uint64_t n = rejects_all;
    pthread_mutex_unlock(&rejects_lock);
    return n;
}

void cmr_rejects_each(cmr_rejects_fn *fn, void *opaque)
{
    pthread_mutex_lock(&rejects_lock);
    size_t it = 0;
    void *val;
    while (cmr_map_next(&rejects, &it, NULL, NULL, &val)) {
        const reject_entry_t *e = val;
        fn(e->topic, e->reason, e->count, opaque);
    }
    pthread_mutex_unlock(&rejects_lock);
}

void cmr_rejects_log_summary(void)
{
    pthread_mutex_lock(&rejects_lock);
    size_t it = 0;
    void *val;
    while (cmr_map_next(&rejects, &it, NULL, NULL, &val)) {
        reject_entry_t *e = val;
        if (e->count == e->reported)
            continue;
        char t[256];
        cmr_log(CMR_LOG_INFO, "wire.rejected_total", "topic=\"%s\" reason=%s count=%llu new=%llu",
                cmr_log_escape(e->topic, t, sizeof t), e->reason, (unsigned long long)e->count,
                (unsigned long long)(e->count - e->reported));
        e->reported = e->count;
    }
    pthread_mutex_unlock(&rejects_lock);
}
