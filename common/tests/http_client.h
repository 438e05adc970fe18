/*
 * http_client.h - a tiny blocking HTTP/1.1 client for the tests of the HTTP servers
 * (common/tests/test_http_server.c, test_metrics_http.c, cmr-ingest's unit test): connect
 * over IPv4 or IPv6 with a 5 s receive timeout, send a request, read exactly one answer
 * (by Content-Length, or chunked: then decoded), so that keep-alive can be tested; idle
 * connections in bulk.
 *
 * Ownership: answers are malloc'd, the caller's; descriptors are the caller's to close.
 */
#ifndef CMR_TEST_HTTP_CLIENT_H
#define CMR_TEST_HTTP_CLIENT_H

#include <stdbool.h>

/* A connected socket to addr (IPv4 or IPv6 literal) port, or -1. Reads time out after 5 s. */
int hc_connect(const char *addr, int port);
/* Sends request as is; reads one answer (head and Content-Length bytes of body; none when
 * head_only). Returns the status (and *answer, the whole answer text, when answer is not
 * NULL), 0 when the server closed the connection without an answer, -1 on a timeout or
 * error. */
int hc_request(int fd, const char *request, bool head_only, char **answer);
/* One request on a fresh connection (Connection: close). Status as hc_request. */
int hc_get(const char *addr, int port, const char *target, char **answer);
/* true when the server closed fd within timeout_ms (reads 0 bytes). */
bool hc_closed_within(int fd, int timeout_ms);

#endif
