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

/* The end (index of the closing ']') of the bracket expression that starts at p[0] == '[',
 * following fnmatch's rules: a leading '!' or '^' negates, a ']' right after that is a
 * member, "[:class:]", "[=c=]" and "[.c.]" are units, '\\' quotes the next character.
 * 0 when the expression is not terminated. */
static size_t bracket_end(const char *p)
{
    size_t j = 1;
    if (p[j] == '!' || p[j] == '^')
        j++;
    if (p[j] == ']')
        j++;
    while (p[j] && p[j] != ']') {
        if (p[j] == '[' && (p[j + 1] == ':' || p[j + 1] == '=' || p[j + 1] == '.')) {
            const char close[3] = {p[j + 1], ']', '\0'};
            const char *end = strstr(p + j + 2, close);
            if (!end)
                return 0;
            j = (size_t)(end - p) + 2;
        } else if (p[j] == '\\' && p[j + 1]) {
            j += 2;
        } else {
            j++;
        }
    }
    return p[j] == ']' ? j : 0;
}

/* A character the bracket expression p[0..end] matches (asking fnmatch), or 0. */
static char bracket_member(const char *p, size_t end)
{
    char *expr = strndup(p, end + 1);
    char found = 0;
    for (int c = 1; expr && c < 256 && !found; c++) {
        const char one[2] = {(char)c, '\0'};
        if (fnmatch(expr, one, 0) == 0)
            found = (char)c;
    }
    free(expr);
    return found;
}

int cmr_cfg_glob_check(const char *pattern, char *why, size_t whylen)
{
    size_t n = strlen(pattern);
    char *witness = malloc(n + 1); /* one character per pattern element at most */
    if (!witness) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    size_t w = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (pattern[i] == '*') {
            continue;
        } else if (pattern[i] == '?') {
            witness[w++] = 'x';
        } else if (pattern[i] == '\\') {
            if (pattern[i + 1] == '\0') {
                snprintf(why, whylen, "it ends with a lone backslash (write \\\\ for a literal one)");
                rc = -1;
            } else {
                witness[w++] = pattern[++i];
            }
        } else if (pattern[i] == '[') {
            size_t end = bracket_end(pattern + i);
            char c = end ? bracket_member(pattern + i, end) : 0;
            if (!end)
                snprintf(why, whylen,
                         "the bracket expression at offset %zu is not terminated by ']' (write \\[ for a literal '[')",
                         i);
            else if (!c)
                snprintf(why, whylen, "the bracket expression at offset %zu matches no character", i);
            if (!end || !c)
                rc = -1;
            witness[w++] = c;
            i += end;
        } else {
            witness[w++] = pattern[i];
        }
    }
    witness[w] = '\0';
    if (rc == 0 && fnmatch(pattern, witness, 0) != 0) {
        snprintf(why, whylen, "it can never match (fnmatch)");
        rc = -1;
    }
    free(witness);
    return rc;
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
