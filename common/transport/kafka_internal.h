/*
 * kafka_internal.h - helpers shared by the transport's files (internal).
 */
#ifndef CMR_KAFKA_INTERNAL_H
#define CMR_KAFKA_INTERNAL_H

#include "cmr/kafka.h"

int cmr_kafka_conf_default(rd_kafka_conf_t *rk_conf, const cmr_conf_t *conf, const char *key, const char *value,
                           char *errbuf, size_t errlen);

#endif
