/*
 * ing_names.c - the method table (cmr.methods: id -> class, name, descriptor) and the
 * agent table (cmr.registrations: agent id -> name, host, pid) used for display.
 *
 * Stored values (meta store, and what cmr_names_load_* read): NUL-separated fields,
 *   method: class \0 name \0 descriptor
 *   agent:  agent name \0 host \0 pid (decimal) \0 JVM vendor and version
 * Display names: "com.example.Foo.bar(I)V" and "name@host pid 123".
 *
 * Ownership: the table owns every string; lookups copy into the caller's buffer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/ids.h"
#include "cmr/ingest.h"

typedef struct entry {
    uint64_t id;
    char *display;
} entry_t;

typedef struct table {
    entry_t *items; /* open addressing, display NULL = empty */
    size_t count, cap;
} table_t;

struct cmr_names {
    table_t methods, agents;
};

cmr_names_t *cmr_names_new(void)
{
    return calloc(1, sizeof(cmr_names_t));
}

static void table_free(table_t *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->items[i].display);
    free(t->items);
}

void cmr_names_free(cmr_names_t *n)
{
    if (!n)
        return;
    table_free(&n->methods);
    table_free(&n->agents);
    free(n);
}

static size_t slot(uint64_t id, size_t cap)
{
    return (size_t)(id * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1);
}

static entry_t *table_find(const table_t *t, uint64_t id)
{
    if (!t->cap)
        return NULL;
    for (size_t h = slot(id, t->cap);; h = (h + 1) & (t->cap - 1)) {
        if (!t->items[h].display)
            return NULL;
        if (t->items[h].id == id)
            return &t->items[h];
    }
}

/* Takes ownership of display. */
static int table_put(table_t *t, uint64_t id, char *display)
{
    entry_t *e = table_find(t, id);
    if (e) {
        free(e->display);
        e->display = display;
        return 0;
    }
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        entry_t *items = calloc(cap, sizeof *items);
        if (!items) {
            free(display);
            return -1;
        }
        for (size_t i = 0; i < t->cap; i++)
            if (t->items[i].display) {
                size_t h = slot(t->items[i].id, cap);
                while (items[h].display)
                    h = (h + 1) & (cap - 1);
                items[h] = t->items[i];
            }
        free(t->items);
        t->items = items;
        t->cap = cap;
    }
    size_t h = slot(id, t->cap);
    while (t->items[h].display)
        h = (h + 1) & (t->cap - 1);
    t->items[h] = (entry_t){id, display};
    t->count++;
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
    size_t n = strlen(cls) + strlen(name) + strlen(desc) + 2;
    char *d = malloc(n);
    if (!d)
        return NULL;
    snprintf(d, n, "%s.%s%s", cls, name, desc);
    for (char *p = d; *p && p < d + strlen(cls); p++)
        if (*p == '/')
            *p = '.';
    return d;
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
    size_t sz = strlen(f[0]) + strlen(f[1]) + strlen(f[2]) + 16;
    char *d = malloc(sz);
    if (d)
        snprintf(d, sz, "%s@%s pid %s", f[0], f[1], f[2]);
    free(copy);
    return d ? table_put(&n->agents, id, d) : -1;
}

static char *join(const char *const *f, int nf, size_t *len)
{
    size_t n = 0;
    for (int i = 0; i < nf; i++)
        n += strlen(f[i]) + 1;
    char *v = malloc(n);
    if (!v)
        return NULL;
    char *p = v;
    for (int i = 0; i < nf; i++) {
        size_t l = strlen(f[i]);
        memcpy(p, f[i], l + 1);
        p += l + 1;
    }
    *len = n - 1; /* no trailing NUL */
    return v;
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

const char *cmr_names_method(const cmr_names_t *n, uint64_t id, char *buf, size_t len)
{
    entry_t *e = table_find(&n->methods, id);
    if (e)
        snprintf(buf, len, "%s", e->display);
    else
        snprintf(buf, len, "method#%016" PRIx64, id);
    return buf;
}

const char *cmr_names_agent(const cmr_names_t *n, uint64_t id, char *buf, size_t len)
{
    entry_t *e = table_find(&n->agents, id);
    if (e)
        snprintf(buf, len, "%s", e->display);
    else
        snprintf(buf, len, "agent#%016" PRIx64, id);
    return buf;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t table_match(const table_t *t, const char *pattern, uint64_t **ids)
{
    *ids = NULL;
    size_t n = 0;
    uint64_t *v = malloc((t->count + 1) * sizeof *v);
    if (!v)
        return 0;
    uint8_t raw[8];
    if (strlen(pattern) == 16 && cmr_unhex(pattern, raw, 8) == 0) {
        uint64_t id = 0;
        for (int i = 0; i < 8; i++)
            id = id << 8 | raw[i];
        v[n++] = id;
    } else {
        for (size_t i = 0; i < t->cap; i++)
            if (t->items[i].display && strstr(t->items[i].display, pattern))
                v[n++] = t->items[i].id;
    }
    qsort(v, n, sizeof *v, cmp_u64);
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
    return n->methods.count + n->agents.count;
}
