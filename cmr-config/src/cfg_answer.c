/*
 * cfg_answer.c - builds AgentConfiguration or NoEnvironment for a registration (see
 * cfg_answer.h): the mapping table picks the environment, the environment gives the
 * sensor settings (one enabled setting per sensor kind its assignments use) and strategy.
 */
#include "cmr/cfg_answer.h"

#include <stdio.h>
#include <string.h>

#include "cmr/cfg_match.h"
#include "cmr/ids.h"

const char *cmr_cfg_agent_env(const cmr_cfg_state_t *s, const char *name, const cmr_strings_t *ips)
{
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, NULL);
    long i = cmr_cfg_resolve(m, n, name, ips);
    if (i < 0 || !cmr_cfg_state_env(s, m[i].environment_id, NULL))
        return NULL;
    return m[i].environment_id;
}

static void addresses_str(const cmr_strings_t *ips, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ips->count && at < len; i++) {
        int w = snprintf(buf + at, len - at, "%s%s", i ? "," : "", ips->items[i]);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

static void fill_no_env(const cmr_cfg_state_t *s, const cmr_agent_registration_t *reg, int64_t now_ms,
                        cmr_cfg_answer_t *a)
{
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, NULL);
    long i = cmr_cfg_resolve(m, n, reg->agent_name, &reg->ip_addresses);
    char addrs[256];
    addresses_str(&reg->ip_addresses, addrs, sizeof addrs);
    if (i >= 0)
        snprintf(a->reason, sizeof a->reason,
                 "agent mapping %ld (agent \"%s\", address %s) names environment \"%s\", which does not exist", i + 1,
                 m[i].agent_pattern, m[i].address, m[i].environment_id);
    else
        snprintf(a->reason, sizeof a->reason,
                 "no agent mapping matches agent name \"%s\" with addresses [%s] (%zu mappings)", reg->agent_name,
                 addrs, n);
    a->configured = 0;
    a->no_env.instance_id = reg->instance_id;
    a->no_env.agent_name = reg->agent_name;
    a->no_env.hostname = reg->hostname;
    a->no_env.ip_addresses = reg->ip_addresses;
    a->no_env.reason = a->reason;
    a->no_env.time_ms = now_ms;
}

void cmr_cfg_answer(const cmr_cfg_state_t *s, const cmr_agent_registration_t *reg, int64_t now_ms, cmr_cfg_answer_t *a)
{
    memset(a, 0, sizeof *a);
    const char *env_id = cmr_cfg_agent_env(s, reg->agent_name, &reg->ip_addresses);
    int64_t revision = 0;
    const cmr_environment_t *env = env_id ? cmr_cfg_state_env(s, env_id, &revision) : NULL;
    if (!env) {
        fill_no_env(s, reg, now_ms, a);
        return;
    }
    a->configured = 1;
    cmr_agent_configuration_t *c = &a->cfg;
    c->instance_id = reg->instance_id;
    c->agent_id = (int64_t)cmr_agent_id(reg->agent_name, reg->hostname);
    c->environment_id = env->id;
    c->environment_name = env->name;
    c->revision = revision;
    c->strategy = env->strategy;
    int used[3] = {0, 0, 0};
    for (size_t i = 0; i < env->assignments.count; i++)
        if ((unsigned)env->assignments.items[i].sensor < 3)
            used[env->assignments.items[i].sensor] = 1;
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        if (!used[k])
            continue;
        a->sensors[n].kind = (cmr_sensor_kind_t)k;
        a->sensors[n].enabled = true;
        n++;
    }
    c->sensors.items = a->sensors;
    c->sensors.count = n;
}
