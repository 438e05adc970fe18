/*
 * topics.h - the Kafka topics of the system and the key of every message, in one place.
 *
 *  topic                       producer -> consumer              key
 *  cmr.registrations           agent -> cmr-config               instance id
 *  cmr.cmd.<instance id>       cmr-config, -instrumenter -> agent "cmd" (keeps commands in order)
 *  cmr.classes                 agent -> cmr-instrumenter         agent id
 *  cmr.agent-events            agent -> CMR                      agent id
 *  cmr.config   (compacted)    cmr-config -> everyone            environment id | "mappings"
 *  cmr.methods  (compacted)    cmr-instrumenter -> ingest, UI    method id
 *  cmr.events                  agent -> cmr-ingest               trace id
 *  cmr.metrics                 agent -> cmr-ingest (metrics)     environment id
 *  cmr.alerts                  cmr-ingest (metrics) -> UI, CLI   environment id
 *  cmr.diagnoses               cmr-config -> instrumenter, UI    diagnosis id
 *  cmr.diagnosis-trees         instrumenter -> cmr-config, UI    diagnosis id/agent id
 *  cmr.ingest-workers (compacted) cmr-ingest -> cmr-ingest       worker id
 *
 * The "cmr" prefix can be changed (configuration key topic.prefix) so that several
 * installations can share one Kafka cluster. Ids in keys are lower-case hex.
 */
#ifndef CMR_TOPICS_H
#define CMR_TOPICS_H

#include <stddef.h>

#include "cmr/msg.h"

typedef enum cmr_topic {
    CMR_TOPIC_REGISTRATIONS,
    CMR_TOPIC_COMMANDS, /* per agent: cmr.cmd.<instance id> */
    CMR_TOPIC_CLASSES,
    CMR_TOPIC_AGENT_EVENTS,
    CMR_TOPIC_CONFIG,
    CMR_TOPIC_METHODS,
    CMR_TOPIC_EVENTS,
    CMR_TOPIC_METRICS,
    CMR_TOPIC_ALERTS,          /* threshold events (cmr-ingest's metrics module) */
    CMR_TOPIC_DIAGNOSES,       /* diagnoses and their history (docs/DIAGNOSIS.md) */
    CMR_TOPIC_DIAGNOSIS_TREES, /* the discovered callees per diagnosis and agent */
    CMR_TOPIC_INGEST_WORKERS,  /* compacted: cmr-ingest workers' HTTP APIs and partitions */
    CMR_TOPIC_BUDGET,          /* compacted: the methods the overhead budget removed */
    CMR_TOPIC_GRANTS,          /* compacted: class grants with their bytes, sent ahead to new JVMs */
    CMR_TOPIC__COUNT
} cmr_topic_t;

typedef struct cmr_topic_layout {
    const char *suffix; /* "registrations"; "cmd." for the per-agent command topics */
    int partitions;     /* default partition count for a new cluster */
    int compacted;      /* cleanup.policy=compact */
} cmr_topic_layout_t;

#define CMR_TOPIC_NAME_MAX 256
#define CMR_KEY_MAX 64

/* Sets the prefix of every topic name ("cmr" by default). Call before using topics. */
int cmr_topics_set_prefix(const char *prefix);
const char *cmr_topics_prefix(void);

const cmr_topic_layout_t *cmr_topic_layout(cmr_topic_t topic);
/* Full name of a shared topic, e.g. "cmr.events". Not for CMR_TOPIC_COMMANDS. */
const char *cmr_topic_name(cmr_topic_t topic);
/* "cmr.cmd.<instance id>" into buf. Returns 0, or -1 when the id is not a valid topic
 * component (letters, digits, '-', '_') or does not fit. */
int cmr_topic_command(const char *instance_id, char *buf, size_t len);

/* The topic a message type travels on. */
cmr_topic_t cmr_msg_topic(cmr_msg_type_t type);
/* The key of a message (a NUL-terminated string into buf, at least CMR_KEY_MAX bytes);
 * returns its length. */
size_t cmr_msg_key(cmr_msg_type_t type, const void *msg, char *buf, size_t len);

#endif
