/*
 * http_client.c - the tests' tiny HTTP/1.1 client. See http_client.h.
 */
#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int hc_connect(const char *addr, int port)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, addr, &a->sin6_addr) != 1)
            return -1;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, addr, &a->sin_addr) != 1)
            return -1;
        len = sizeof *a;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Decodes a chunked body in place ("<hex size>\r\n<bytes>\r\n"... "0\r\n\r\n"); its length. */
static size_t dechunk(char *p, size_t n)
{
    size_t in = 0, out = 0;
    while (in < n) {
        char *eol = memmem(p + in, n - in, "\r\n", 2);
        if (!eol)
            break;
        size_t size = strtoul(p + in, NULL, 16);
        in = (size_t)(eol - p) + 2;
        if (size == 0 || in + size > n)
            break;
        memmove(p + out, p + in, size);
        out += size;
        in += size + 2;
    }
    return out;
}

int hc_request(int fd, const char *request, bool head_only, char **answer)
{
    if (answer)
        *answer = NULL;
    size_t n = strlen(request);
    if (send(fd, request, n, MSG_NOSIGNAL) != (ssize_t)n)
        return -1;
    size_t cap = 1 << 16, len = 0, want = 0, head_len = 0;
    bool have_head = false, chunked = false;
    char *buf = malloc(cap + 1);
    if (!buf)
        return -1;
    for (;;) {
        char *end = have_head ? NULL : memmem(buf, len, "\r\n\r\n", 4);
        if (end) {
            have_head = true;
            buf[len] = '\0';
            want = head_len = (size_t)(end + 4 - buf);
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            const char *te = strcasestr(buf, "\r\nTransfer-Encoding: chunked");
            chunked = !head_only && te && te < end;
            if (!head_only && cl && cl < end)
                want += strtoul(cl + 17, NULL, 10);
        }
        if (have_head && chunked && len >= head_len + 5 && !memcmp(buf + len - 5, "0\r\n\r\n", 5))
            break; /* the last chunk (the tests' bodies have no raw line ends of their own) */
        if (have_head && !chunked && len >= want)
            break;
        if (len == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                free(buf);
                return -1;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0) {
            free(buf);
            return r == 0 && len == 0 ? 0 : -1;
        }
        len += (size_t)r;
    }
    if (chunked)
        len = head_len + dechunk(buf + head_len, len - head_len);
    buf[len] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = -1;
    if (answer)
        *answer = buf;
    else
        free(buf);
    return status;
}

int hc_get(const char *addr, int port, const char *target, char **answer)
{
    int fd = hc_connect(addr, port);
    if (fd < 0)
        return -1;
    char req[4096];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", target);
    int status = hc_request(fd, req, false, answer);
    close(fd);
    return status;
}

bool hc_closed_within(int fd, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}
