/*
 * cfg_print.c - writes environments and mappings back in the environment file format
 * (docs/ENVIRONMENTS.md), for `cmr-config show` and `list`. What it writes parses again
 * with cfg_doc.c into the same content.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmr/cfg_doc.h"

/* A YAML double-quoted scalar (safe for globs: '*' would start an alias unquoted) that
 * reads back as exactly s: quotes, backslashes, control characters and YAML's other line
 * breaks (NEL, LS, PS) are escaped (a raw one would be folded into a space). */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else if (p[0] == 0xc2 && p[1] == 0x85) /* NEL, a YAML line break */
            fputs("\\N", f), p++;
        else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) /* LS, PS */
            fputs(p[2] == 0xa8 ? "\\L" : "\\P", f), p += 2;
        else if (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) /* BOM */
            fputs("\\uFEFF", f), p += 2;
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void put_field(FILE *f, const char *indent, const char *key, const char *value)
{
    if (!value)
        return;
    fprintf(f, "%s%s: ", indent, key);
    put_str(f, value);
    fputc('\n', f);
}

static void put_modifiers(FILE *f, int32_t req, int32_t excl)
{
    if (!req && !excl)
        return;
    char a[256], b[256];
    cmr_cfg_modifiers_str(req, NULL, a, sizeof a);
    cmr_cfg_modifiers_str(excl, "!", b, sizeof b);
    fprintf(f, "        modifiers: [");
    /* quote each: "!static" must not be read as a YAML tag */
    const char *lists[2] = {a, b};
    int first = 1;
    for (int i = 0; i < 2; i++) {
        char *save = NULL, copy[256];
        snprintf(copy, sizeof copy, "%s", lists[i]);
        for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            fprintf(f, "%s\"%s\"", first ? "" : ", ", t);
            first = 0;
        }
    }
    fprintf(f, "]\n");
}

void cmr_cfg_write_env(const cmr_environment_t *env, void *stream)
{
    FILE *f = stream;
    fprintf(f, "  - id: ");
    put_str(f, env->id);
    fputc('\n', f);
    put_field(f, "    ", "name", env->name);
    put_field(f, "    ", "description", env->description);
    const cmr_strategy_t *s = &env->strategy;
    fprintf(f,
            "    strategy:\n      send_interval_ms: %d\n      ring_records: %d\n      max_batch_events: %d\n"
            "      metric_interval_ms: %d\n      max_threads: %d\n      stall_threshold_ms: %d\n",
            s->send_interval_ms, s->ring_records, s->max_batch_events, s->metric_interval_ms, s->max_threads,
            s->stall_threshold_ms);
    if (s->max_segment_events != 100000) /* the default is not printed: older outputs stay as they were */
        fprintf(f, "      max_segment_events: %d\n", s->max_segment_events);
    fprintf(f, "    trace_context: %s\n", cmr_cfg_trace_context_name(env->trace_context));
    if (env->request_headers.count) { /* none is not printed: older outputs stay as they were */
        fprintf(f, "    request_headers: [");
        for (size_t i = 0; i < env->request_headers.count; i++) {
            fputs(i ? ", " : "", f);
            put_str(f, env->request_headers.items[i]);
        }
        fprintf(f, "]\n");
    }
    if (env->overhead_budget_pct != 0) /* the instrumenter's default is not printed */
        fprintf(f, "    overhead_budget_pct: %.15g\n", env->overhead_budget_pct > 0 ? env->overhead_budget_pct : 0.0);
    if (env->thresholds.count)
        fprintf(f, "    thresholds:\n");
    for (size_t i = 0; i < env->thresholds.count; i++) {
        const cmr_threshold_rule_t *r = &env->thresholds.items[i];
        fprintf(f, "      - name: ");
        put_str(f, r->name);
        fprintf(f, "\n        %s: ", cmr_threshold_scope_name(r->scope));
        put_str(f, r->pattern);
        fprintf(f, "\n        statistic: %s\n", cmr_stat_name(r->statistic));
        if (cmr_stat_is_latency(r->statistic))
            fprintf(f, "        above: %.17gms\n", r->above);
        else
            fprintf(f, "        above: %.17g\n", r->above);
        fprintf(f, "        for: %" PRId64 "ms\n        min_count: %" PRId64 "\n", r->for_ms, r->min_count);
        if (r->diagnose)
            fprintf(f, "        diagnose: true\n");
    }
    fprintf(f, "    sensors:%s\n", env->assignments.count ? "" : " []");
    for (size_t i = 0; i < env->assignments.count; i++) {
        const cmr_sensor_assignment_t *a = &env->assignments.items[i];
        fprintf(f, "      - sensor: %s\n", cmr_cfg_sensor_name(a->sensor));
        put_field(f, "        ", "class", a->class_pattern);
        put_field(f, "        ", "superclass", a->superclass);
        put_field(f, "        ", "interface", a->interface);
        put_field(f, "        ", "annotation", a->annotation);
        put_field(f, "        ", "method", a->method_pattern);
        put_field(f, "        ", "descriptor", a->descriptor_pattern);
        put_modifiers(f, a->modifiers_required, a->modifiers_excluded);
        if (a->constructors)
            fprintf(f, "        constructors: true\n");
        if (a->trivial)
            fprintf(f, "        trivial: true\n");
    }
}

void cmr_cfg_write_mappings(const cmr_agent_mapping_t *m, size_t n, void *stream)
{
    FILE *f = stream;
    fprintf(f, "mappings:%s\n", n ? "" : " []");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "  - agent: ");
        put_str(f, m[i].agent_pattern);
        fprintf(f, "\n    address: ");
        put_str(f, m[i].address);
        fprintf(f, "\n    environment: ");
        put_str(f, m[i].environment_id);
        fputc('\n', f);
    }
}
