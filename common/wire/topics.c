/*
 * topics.c - topic names, layouts and message keys (see topics.h).
 */
#include "cmr/topics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmr/ids.h"

static const cmr_topic_layout_t layouts[CMR_TOPIC__COUNT] = {
    [CMR_TOPIC_REGISTRATIONS] = {"registrations", 4, 0},
    [CMR_TOPIC_COMMANDS] = {"cmd.", 1, 0},
    [CMR_TOPIC_CLASSES] = {"classes", 8, 0},
    [CMR_TOPIC_AGENT_EVENTS] = {"agent-events", 4, 0},
    [CMR_TOPIC_CONFIG] = {"config", 1, 1},
    [CMR_TOPIC_METHODS] = {"methods", 4, 1},
    [CMR_TOPIC_EVENTS] = {"events", 16, 0},
    [CMR_TOPIC_METRICS] = {"metrics", 4, 0},
    [CMR_TOPIC_ALERTS] = {"alerts", 4, 0},
    [CMR_TOPIC_DIAGNOSES] = {"diagnoses", 1, 0},
    [CMR_TOPIC_DIAGNOSIS_TREES] = {"diagnosis-trees", 1, 0},
    [CMR_TOPIC_INGEST_WORKERS] = {"ingest-workers", 1, 1},
    [CMR_TOPIC_BUDGET] = {"budget", 1, 1},
    [CMR_TOPIC_GRANTS] = {"grants", 4, 1},
};

static char topic_prefix[64] = "cmr";
static char topic_names[CMR_TOPIC__COUNT][CMR_TOPIC_NAME_MAX];
static int topic_names_ready;

static int valid_component(const char *s, int allow_dot)
{
    if (!*s)
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              (allow_dot && c == '.')))
            return 0;
    }
    return 1;
}

static void topic_names_build(void)
{
    for (int t = 0; t < CMR_TOPIC__COUNT; t++)
        snprintf(topic_names[t], sizeof topic_names[t], "%s.%s", topic_prefix, layouts[t].suffix);
    topic_names_ready = 1;
}

int cmr_topics_set_prefix(const char *prefix)
{
    if (!valid_component(prefix, 1) || strlen(prefix) >= sizeof topic_prefix)
        return -1;
    snprintf(topic_prefix, sizeof topic_prefix, "%s", prefix);
    topic_names_build();
    return 0;
}

const char *cmr_topics_prefix(void)
{
    return topic_prefix;
}

const cmr_topic_layout_t *cmr_topic_layout(cmr_topic_t topic)
{
    return (unsigned)topic < CMR_TOPIC__COUNT ? &layouts[topic] : NULL;
}

const char *cmr_topic_name(cmr_topic_t topic)
{
    if ((unsigned)topic >= CMR_TOPIC__COUNT || topic == CMR_TOPIC_COMMANDS)
        return NULL;
    if (!topic_names_ready)
        topic_names_build();
    return topic_names[topic];
}

int cmr_topic_command(const char *instance_id, char *buf, size_t len)
{
    if (!instance_id || !valid_component(instance_id, 0))
        return -1;
    int n = snprintf(buf, len, "%s.%s%s", topic_prefix, layouts[CMR_TOPIC_COMMANDS].suffix, instance_id);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

cmr_topic_t cmr_msg_topic(cmr_msg_type_t type)
{
    switch (type) {
    case CMR_MSG_AGENT_REGISTRATION: return CMR_TOPIC_REGISTRATIONS;
    case CMR_MSG_AGENT_CONFIGURATION:
    case CMR_MSG_NO_ENVIRONMENT:
    case CMR_MSG_BYTECODE_RESEND:
    case CMR_MSG_REDEFINE:
    case CMR_MSG_CLASS_GRANTS:
    case CMR_MSG_SIGNED_COMMAND: return CMR_TOPIC_COMMANDS;
    case CMR_MSG_CLASS_LOADED: return CMR_TOPIC_CLASSES;
    case CMR_MSG_REDEFINE_RESULT:
    case CMR_MSG_AGENT_STATUS: return CMR_TOPIC_AGENT_EVENTS;
    case CMR_MSG_CONFIG_CHANGE: return CMR_TOPIC_CONFIG;
    case CMR_MSG_METHOD_ENTRY: return CMR_TOPIC_METHODS;
    case CMR_MSG_EVENT_BATCH: return CMR_TOPIC_EVENTS;
    case CMR_MSG_METRIC_BATCH: return CMR_TOPIC_METRICS;
    case CMR_MSG_THRESHOLD_EVENT: return CMR_TOPIC_ALERTS;
    case CMR_MSG_DIAGNOSIS: return CMR_TOPIC_DIAGNOSES;
    case CMR_MSG_DIAGNOSIS_TREE: return CMR_TOPIC_DIAGNOSIS_TREES;
    case CMR_MSG_INGEST_WORKER: return CMR_TOPIC_INGEST_WORKERS;
    case CMR_MSG_BUDGET_REMOVAL: return CMR_TOPIC_BUDGET;
    default: return CMR_TOPIC__COUNT;
    }
}

static size_t key_id(uint64_t id, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%016" PRIx64, id);
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

static size_t key_str(const char *s, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s", s ? s : "");
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

size_t cmr_msg_key(cmr_msg_type_t type, const void *msg, char *buf, size_t len)
{
    if (len)
        buf[0] = '\0';
    switch (type) {
    case CMR_MSG_AGENT_REGISTRATION: return key_str(((const cmr_agent_registration_t *)msg)->instance_id, buf, len);
    case CMR_MSG_CLASS_LOADED: return key_id((uint64_t)((const cmr_class_loaded_t *)msg)->agent_id, buf, len);
    case CMR_MSG_REDEFINE_RESULT: return key_id((uint64_t)((const cmr_redefine_result_t *)msg)->agent_id, buf, len);
    case CMR_MSG_AGENT_STATUS: return key_id((uint64_t)((const cmr_agent_status_t *)msg)->agent_id, buf, len);
    case CMR_MSG_CONFIG_CHANGE: {
        const cmr_config_change_t *c = msg;
        if (c->kind == CMR_CONFIG_MAPPINGS || !c->environment)
            return key_str("mappings", buf, len);
        return key_str(c->environment->id, buf, len);
    }
    case CMR_MSG_METHOD_ENTRY: return key_id((uint64_t)((const cmr_method_entry_t *)msg)->method_id, buf, len);
    case CMR_MSG_EVENT_BATCH:
        if (len < 33)
            return 0;
        cmr_hex(((const cmr_event_msg_t *)msg)->key_trace_id, 16, buf); /* the first segment's */
        return 32;
    /* every JVM of an environment in one partition: its metrics merge in one store */
    case CMR_MSG_METRIC_BATCH: return key_str(((const cmr_metric_batch_t *)msg)->environment_id, buf, len);
    case CMR_MSG_THRESHOLD_EVENT: return key_str(((const cmr_threshold_event_t *)msg)->environment_id, buf, len);
    case CMR_MSG_DIAGNOSIS: return key_str(((const cmr_diagnosis_t *)msg)->id, buf, len);
    case CMR_MSG_INGEST_WORKER: return key_str(((const cmr_ingest_worker_t *)msg)->worker_id, buf, len);
    case CMR_MSG_BUDGET_REMOVAL: {
        const cmr_budget_removal_msg_t *r = msg;
        int n =
            snprintf(buf, len, "%s/%016" PRIx64, r->environment_id ? r->environment_id : "", (uint64_t)r->method_id);
        return n > 0 && (size_t)n < len ? (size_t)n : 0;
    }
    case CMR_MSG_DIAGNOSIS_TREE: {
        const cmr_diagnosis_tree_t *t = msg;
        int n = snprintf(buf, len, "%s/%016" PRIx64, t->diagnosis_id ? t->diagnosis_id : "", (uint64_t)t->agent_id);
        return n > 0 && (size_t)n < len ? (size_t)n : 0;
    }
    case CMR_MSG_AGENT_CONFIGURATION:
    case CMR_MSG_NO_ENVIRONMENT:
    case CMR_MSG_BYTECODE_RESEND:
    case CMR_MSG_REDEFINE:
    case CMR_MSG_CLASS_GRANTS:
    case CMR_MSG_SIGNED_COMMAND:
        /* One constant key: every command of an agent lands in one partition and keeps
         * its order, however many partitions the command topic was created with. */
        return key_str("cmd", buf, len);
    default: return 0;
    }
}
