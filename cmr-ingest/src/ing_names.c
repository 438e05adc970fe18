/*
 * ing_names.c - the method table (cmr.methods: id -> class, name, descriptor) and the
 * agent table (cmr.registrations: agent id -> name, host, pid) used for display.
 *
 * Stored values (meta store, and what cmr_names_load_* read): NUL-separated fields,
 *   method: class \0 name \0 descriptor
 *   agent:  agent name \0 host \0 pid (decimal) \0 JVM vendor and version
 * Display names: "com.example.Foo.bar(I)V" and "name@host pid 123".
 *
 * Ownership: the tables (cmr_u64map_t, id -> display name) own every string; lookups copy
 * into the caller's buffer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/map.h"

struct cmr_names {
    cmr_u64map_t methods, agents; /* id -> display name (owned, malloc'd) */
};

static char *method_display(const char *cls, const char *name, const char *desc);
static int table_put(cmr_u64map_t *t, uint64_t id, char *display);

/* The nodes the agent writes itself (cmr/ids.h), named without cmr.methods. */
static int put_synthetic_methods(cmr_names_t *n)
{
    for (int jakarta = 0; jakarta < 2; jakarta++) {
        const char *c, *m, *d;
        cmr_async_completion_name(jakarta, &c, &m, &d);
        char *display = method_display(c, m, d);
        if (!display || table_put(&n->methods, cmr_async_completion_id(jakarta), display) != 0)
            return -1;
    }
    return 0;
}

cmr_names_t *cmr_names_new(void)
{
    cmr_names_t *n = calloc(1, sizeof(cmr_names_t));
    if (n && put_synthetic_methods(n) != 0) {
        cmr_names_free(n);
        return NULL;
    }
    return n;
}

static void table_free(cmr_u64map_t *t)
{
    size_t it = 0;
    void *display;
    while (cmr_u64map_next(t, &it, NULL, &display))
        free(display);
    cmr_u64map_free(t);
}

void cmr_names_free(cmr_names_t *n)
{
    if (!n)
        return;
    table_free(&n->methods);
    table_free(&n->agents);
    free(n);
}

/* Takes ownership of display (freed on failure too). */
static int table_put(cmr_u64map_t *t, uint64_t id, char *display)
{
    void **slot = cmr_u64map_get_slot(t, id, NULL);
    if (!slot) {
        free(display);
        return -1;
    }
    free(*slot);
    *slot = display;
    return 0;
}

/* Splits a NUL-separated value into up to max fields (pointers into a copy). */
static int split(const void *val, size_t len, char **copy, const char **fields, int max)
{
    *copy = malloc(len + 1);
    if (!*copy)
        return -1;
    memcpy(*copy, val, len);
    (*copy)[len] = '\0';
    int n = 0;
    const char *p = *copy, *end = *copy + len;
    while (n < max) {
        fields[n++] = p;
        p += strlen(p);
        if (p >= end)
            break;
        p++;
    }
    for (int i = n; i < max; i++)
        fields[i] = "";
    return n;
}

static char *method_display(const char *cls, const char *name, const char *desc)
{
    cmr_buf_t b = {0};
    for (const char *p = cls; *p; p++) /* class names come with '/' separators */
        cmr_buf_putc(&b, *p == '/' ? '.' : *p);
    cmr_buf_printf(&b, ".%s%s", name, desc);
    return cmr_buf_take(&b);
}

int cmr_names_load_method(cmr_names_t *n, uint64_t id, const void *val, size_t len)
{
    char *copy;
    const char *f[3];
    if (split(val, len, &copy, f, 3) < 0)
        return -1;
    char *d = method_display(f[0], f[1], f[2]);
    free(copy);
    return d ? table_put(&n->methods, id, d) : -1;
}

int cmr_names_load_agent(cmr_names_t *n, uint64_t id, const void *val, size_t len)
{
    char *copy;
    const char *f[4];
    if (split(val, len, &copy, f, 4) < 0)
        return -1;
    cmr_buf_t b = {0};
    cmr_buf_printf(&b, "%s@%s pid %s", f[0], f[1], f[2]);
    char *d = cmr_buf_take(&b);
    free(copy);
    return d ? table_put(&n->agents, id, d) : -1;
}

/* The fields, each followed by a NUL except the last (whose NUL is not counted). */
static char *join(const char *const *f, int nf, size_t *len)
{
    cmr_buf_t b = {0};
    for (int i = 0; i < nf; i++)
        cmr_buf_put(&b, f[i], strlen(f[i]) + (i + 1 < nf));
    *len = b.len;
    return cmr_buf_take(&b);
}

char *cmr_names_method_value(const cmr_method_entry_t *m, size_t *len)
{
    const char *f[3] = {m->class_name ? m->class_name : "", m->method_name ? m->method_name : "",
                        m->descriptor ? m->descriptor : ""};
    return join(f, 3, len);
}

char *cmr_names_agent_value(const cmr_agent_registration_t *r, size_t *len)
{
    char pid[32], jvm[512];
    snprintf(pid, sizeof pid, "%lld", (long long)r->pid);
    snprintf(jvm, sizeof jvm, "%s %s", r->jvm_vendor ? r->jvm_vendor : "", r->jvm_version ? r->jvm_version : "");
    const char *f[4] = {r->agent_name ? r->agent_name : "", r->hostname ? r->hostname : "", pid, jvm};
    return join(f, 4, len);
}

int cmr_names_put_method(cmr_names_t *n, const cmr_method_entry_t *m)
{
    size_t len;
    char *v = cmr_names_method_value(m, &len);
    int rc = v ? cmr_names_load_method(n, (uint64_t)m->method_id, v, len) : -1;
    free(v);
    return rc;
}

int cmr_names_put_agent(cmr_names_t *n, const cmr_agent_registration_t *r)
{
    size_t len;
    char *v = cmr_names_agent_value(r, &len);
    uint64_t id = cmr_agent_id(r->agent_name, r->hostname, r->instance_id);
    int rc = v ? cmr_names_load_agent(n, id, v, len) : -1;
    free(v);
    return rc;
}

/* The display name of id in t, or "<kind>#<hex id>", into buf. */
/* id's display name from table t into buf, or NULL when t does not have it. */
static const char *table_known(const cmr_u64map_t *t, uint64_t id, char *buf, size_t len)
{
    const char *display = cmr_u64map_get(t, id);
    if (!display)
        return NULL;
    snprintf(buf, len, "%s", display);
    return buf;
}

static const char *table_name(const cmr_u64map_t *t, const char *kind, uint64_t id, char *buf, size_t len)
{
    if (!table_known(t, id, buf, len))
        snprintf(buf, len, "%s#%016" PRIx64, kind, id);
    return buf;
}

const char *cmr_names_method(const cmr_names_t *n, uint64_t id, char *buf, size_t len)
{
    return table_name(&n->methods, "method", id, buf, len);
}

const char *cmr_names_method_known(const cmr_names_t *n, uint64_t id, char *buf, size_t len)
{
    return table_known(&n->methods, id, buf, len);
}

const char *cmr_names_agent(const cmr_names_t *n, uint64_t id, char *buf, size_t len)
{
    return table_name(&n->agents, "agent", id, buf, len);
}

static size_t table_match(const cmr_u64map_t *t, const char *pattern, uint64_t **ids)
{
    *ids = NULL;
    size_t n = 0;
    uint64_t *v = malloc((cmr_u64map_count(t) + 1) * sizeof *v);
    if (!v)
        return 0;
    uint64_t one;
    if (cmr_id64_parse(pattern, strlen(pattern), &one) == 0) {
        v[n++] = one;
    } else {
        size_t it = 0;
        uint64_t id;
        void *display;
        while (cmr_u64map_next(t, &it, &id, &display))
            if (strstr(display, pattern))
                v[n++] = id;
    }
    qsort(v, n, sizeof *v, cmr_u64_cmp);
    *ids = v;
    return n;
}

size_t cmr_names_find_methods(const cmr_names_t *n, const char *pattern, uint64_t **ids)
{
    return table_match(&n->methods, pattern, ids);
}

size_t cmr_names_find_agents(const cmr_names_t *n, const char *pattern, uint64_t **ids)
{
    return table_match(&n->agents, pattern, ids);
}

size_t cmr_names_count(const cmr_names_t *n)
{
    return cmr_u64map_count(&n->methods) + cmr_u64map_count(&n->agents);
}
