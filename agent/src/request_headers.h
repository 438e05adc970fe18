/*
 * request_headers.h - the request headers an environment asks entry traces to keep
 * (AgentConfiguration.request_headers), as the agent hands them to the probe.
 *
 * cmr-config checks the names before it publishes them; the agent does not take that on
 * trust: only lower-case RFC 9110 tokens of at most CMR_MAX_REQUEST_HEADER_NAME bytes are
 * kept, at most CMR_MAX_REQUEST_HEADERS of them, joined by '\n' for the probe
 * (Probe.requestHeaders0, probe_rings.c).
 */
#ifndef CMR_AGENT_REQUEST_HEADERS_H
#define CMR_AGENT_REQUEST_HEADERS_H

#include <stddef.h>

#include "cmr/msg.h"

/* Room for every name the agent keeps, joined, with the terminating NUL. */
#define CMR_REQUEST_HEADERS_JOINED (CMR_MAX_REQUEST_HEADERS * (CMR_MAX_REQUEST_HEADER_NAME + 1))

/* Writes the valid names of names[0..n) (NULL entries skipped) into out, joined by '\n'
 * ("" for none); returns how many it kept. */
size_t cmr_request_headers_join(char out[CMR_REQUEST_HEADERS_JOINED], char *const *names, size_t n);

#endif
