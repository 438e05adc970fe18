/*
 * cfg_match.c - agent mapping resolution (see cfg_match.h): name globs, IP addresses and
 * CIDR blocks (v4 and v6), first match wins.
 */
#include "cmr/cfg_match.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cmr_cfg_glob(const char *pattern, const char *s)
{
    return fnmatch(pattern, s, 0) == 0;
}

/* Plain address into 16 bytes; v4 (and v4-mapped v6) as family 4 in the first 4 bytes. */
static int parse_ip(const char *s, int *family, uint8_t out[16])
{
    memset(out, 0, 16);
    if (inet_pton(AF_INET, s, out) == 1) {
        *family = 4;
        return 0;
    }
    uint8_t v6[16];
    if (inet_pton(AF_INET6, s, v6) != 1)
        return -1;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(v6, mapped, 12) == 0) {
        *family = 4;
        memcpy(out, v6 + 12, 4);
    } else {
        *family = 6;
        memcpy(out, v6, 16);
    }
    return 0;
}

int cmr_cfg_addr_parse(const char *spec, cmr_cfg_addr_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (strcmp(spec, "*") == 0) {
        out->any = 1;
        return 0;
    }
    char ip[64];
    const char *slash = strchr(spec, '/');
    size_t iplen = slash ? (size_t)(slash - spec) : strlen(spec);
    if (iplen == 0 || iplen >= sizeof ip) {
        snprintf(err, errlen, "\"%s\" is not an IP address or CIDR block", spec);
        return -1;
    }
    memcpy(ip, spec, iplen);
    ip[iplen] = '\0';
    if (parse_ip(ip, &out->family, out->bytes) != 0) {
        snprintf(err, errlen, "\"%s\" is not an IP address or CIDR block (e.g. 10.0.0.0/8, 2001:db8::/32, *)", spec);
        return -1;
    }
    int max = out->family == 4 ? 32 : 128;
    out->prefix = max;
    if (slash) {
        char *end;
        long p = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || p < 0 || p > max) {
            snprintf(err, errlen, "\"%s\": prefix length must be 0..%d", spec, max);
            return -1;
        }
        out->prefix = (int)p;
    }
    return 0;
}

bool cmr_cfg_addr_match(const cmr_cfg_addr_t *a, const char *ip)
{
    if (a->any)
        return true;
    int family;
    uint8_t b[16];
    if (!ip || parse_ip(ip, &family, b) != 0 || family != a->family)
        return false;
    int bits = a->prefix;
    for (int i = 0; bits > 0; i++, bits -= 8) {
        uint8_t mask = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
        if ((a->bytes[i] & mask) != (b[i] & mask))
            return false;
    }
    return true;
}

static bool any_address_matches(const char *spec, const cmr_strings_t *ips)
{
    cmr_cfg_addr_t a;
    char err[128];
    if (cmr_cfg_addr_parse(spec, &a, err, sizeof err) != 0)
        return false;
    if (a.any)
        return true;
    for (size_t i = 0; ips && i < ips->count; i++)
        if (cmr_cfg_addr_match(&a, ips->items[i]))
            return true;
    return false;
}

long cmr_cfg_resolve(const cmr_agent_mapping_t *m, size_t n, const char *agent_name, const cmr_strings_t *ips)
{
    for (size_t i = 0; i < n; i++)
        if (cmr_cfg_glob(m[i].agent_pattern, agent_name ? agent_name : "") && any_address_matches(m[i].address, ips))
            return (long)i;
    return -1;
}
