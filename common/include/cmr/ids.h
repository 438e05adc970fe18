/*
 * ids.h - the identifiers of the system (see docs/ARCHITECTURE.md, "Identifiers").
 *
 *   class hash   XXH3-64 of the original class bytes
 *   method id    XXH3-64 of "internal/class/Name.method(descriptor)"
 *   agent id     XXH3-64 of "<agent name>@<host>/<instance id>": one per JVM run (two JVMs
 *                started with the same name on one host are two agents), no allocation
 *   instance id  128 random bits, 32 hex characters: one agent run
 *   trace id     128 random bits (W3C traceparent compatible), never all zero
 */
#ifndef CMR_IDS_H
#define CMR_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t cmr_class_hash(const void *bytes, size_t len);
uint64_t cmr_method_id(const char *class_name, const char *method_name, const char *descriptor);
/* The node of an async servlet request's completion, which the agent writes itself (no
 * method of the application stands for it): from the servlet's return from service to
 * the container's call of AsyncListener.onComplete, on a segment of its own under the
 * request's call, with the request's final status. Its id is the method id of that
 * listener method, the jakarta or the javax one (cmr_async_completion_id); cmr-ingest
 * names it without cmr.methods and takes the request's status from its segment. */
uint64_t cmr_async_completion_id(bool jakarta);
bool cmr_method_is_async_completion(uint64_t method_id);
/* Its class (internal form), name and descriptor. */
void cmr_async_completion_name(bool jakarta, const char **class_name, const char **method_name,
                               const char **descriptor);

/* The agent id of one JVM run: computed by anyone who saw its registration (NULL strings
 * count as empty). */
uint64_t cmr_agent_id(const char *agent_name, const char *hostname, const char *instance_id);

/* Fills out with random bytes from the kernel (getrandom), never all zero. 0 or -1. */
int cmr_random_bytes(void *out, size_t len);
/* 32 lower-case hex chars + NUL into buf (>= 33 bytes). 0 or -1. */
int cmr_instance_id_new(char *buf, size_t len);

/* Lower-case hex of bytes into buf (needs 2*len+1). */
void cmr_hex(const void *bytes, size_t len, char *buf);
/* Parses exactly 2*len hex chars. 0 or -1. */
int cmr_unhex(const char *hex, void *bytes, size_t len);
/* A 64-bit id as the CLIs, APIs and topics write it (agent, method, diagnosis ids): the n
 * chars at hex must be exactly 16 hex digits (hex need not end there, so a comma-separated
 * list is parsed in place). Fills *id (big-endian digits). 0 or -1 (*id untouched). */
int cmr_id64_parse(const char *hex, size_t n, uint64_t *id);

#endif
