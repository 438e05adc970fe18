/*
 * cfg_match.h - agent mapping resolution: which environment does an agent get?
 *
 * A mapping is (agent name glob, address, environment id). The address is '*', one IP
 * address (v4 or v6) or a CIDR block; it matches when any of the agent's addresses falls
 * inside. The first mapping of the table that matches wins (table order = file order).
 * Globs are fnmatch(3) patterns without flags: '*' also matches '/' and '.'.
 */
#ifndef CMR_CFG_MATCH_H
#define CMR_CFG_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"

typedef struct cmr_cfg_addr {
    int any;    /* '*' */
    int family; /* 4 or 6 */
    uint8_t bytes[16];
    int prefix; /* prefix length in bits */
} cmr_cfg_addr_t;

bool cmr_cfg_glob(const char *pattern, const char *s);
/* Can the glob match at least one string (fnmatch(3) semantics, no flags)? 0, or -1 with
 * the reason in why: an unterminated bracket expression ("[a-"; write \[ for a literal
 * '['), a trailing lone backslash, or a bracket expression no character satisfies ("[z-a]",
 * "[[:nope:]]"). Checked by building a string the pattern should match and asking
 * fnmatch itself. */
int cmr_cfg_glob_check(const char *pattern, char *why, size_t whylen);
/* Parses '*', "10.1.2.3", "10.0.0.0/8", "fe80::1", "2001:db8::/32". 0, or -1 with err. */
int cmr_cfg_addr_parse(const char *spec, cmr_cfg_addr_t *out, char *err, size_t errlen);
/* Does `ip` (a plain address, v4 or v6; v4-mapped v6 counts as v4) fall inside? */
bool cmr_cfg_addr_match(const cmr_cfg_addr_t *a, const char *ip);
/* First mapping matching the agent, or -1. */
long cmr_cfg_resolve(const cmr_agent_mapping_t *m, size_t n, const char *agent_name, const cmr_strings_t *ips);

#endif
