/*
 * cfg_answer.c - builds AgentConfiguration or NoEnvironment for a registration (see
 * cfg_answer.h): the mapping table picks the environment, the environment gives the
 * sensor settings (one enabled setting per sensor kind its assignments use) and strategy.
 */
#include "cmr/cfg_answer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cmr/buf.h"
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

/* The addresses, comma-separated, whole. */
static void addresses_str(const cmr_strings_t *ips, cmr_buf_t *b)
{
    for (size_t i = 0; i < ips->count; i++)
        cmr_buf_printf(b, "%s%s", i ? "," : "", ips->items[i]);
}

/* The reason is a message for people: cut to the storage of the answer when longer, and
 * then marked so ("..." at the end). */
static void set_reason(cmr_cfg_answer_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_reason(cmr_cfg_answer_t *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->reason, sizeof a->reason, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= sizeof a->reason)
        memcpy(a->reason + sizeof a->reason - 4, "...", 4);
}

static void fill_no_env(const cmr_cfg_state_t *s, const cmr_agent_registration_t *reg, int64_t now_ms,
                        cmr_cfg_answer_t *a)
{
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, NULL);
    long i = cmr_cfg_resolve(m, n, reg->agent_name, &reg->ip_addresses);
    cmr_buf_t addrs = {0};
    addresses_str(&reg->ip_addresses, &addrs);
    if (i >= 0)
        set_reason(a, "agent mapping %ld (agent \"%s\", address %s) names environment \"%s\", which does not exist",
                   i + 1, m[i].agent_pattern, m[i].address, m[i].environment_id);
    else
        set_reason(a, "no agent mapping matches agent name \"%s\" with addresses [%s] (%zu mappings)", reg->agent_name,
                   cmr_buf_str(&addrs), n);
    cmr_buf_free(&addrs);
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
    c->agent_id = (int64_t)cmr_agent_id(reg->agent_name, reg->hostname, reg->instance_id);
    c->environment_id = env->id;
    c->environment_name = env->name;
    c->revision = revision;
    c->strategy = env->strategy;
    c->trace_context.policy = env->trace_context;
    c->request_headers = env->request_headers; /* borrowed from the state, as the names above */
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
