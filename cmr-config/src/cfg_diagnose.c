/*
 * cfg_diagnose.c - diagnoses in cmr-config: the operator commands (start, stop, list,
 * show) and the worker's steps (start from a threshold event, end on time to live or back
 * to normal). See cmr/cfg_diagnose.h and docs/DIAGNOSIS.md.
 *
 * Every change is written as a new revision of the diagnosis on cmr.diagnoses; the state
 * is the projection of that topic (cmr/diagnoses.h). A diagnosis a threshold starts has
 * an id derived from the environment, rule, subject and window, so that two cmr-config
 * workers that both see the event write the same revision (the projection keeps one).
 */
#include "cmr/cfg_diagnose.h"

#include "cmr/cfg_cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

#define MAX_TTL_MS (7LL * 86400000) /* the topic keeps a week at least: an active one is never lost */

/* --- building a diagnosis from the options --------------------------------------------- */

void cmr_cfg_diag_mem_free(cmr_cfg_diag_mem_t *mem)
{
    cmr_buf_free(&mem->agents);
    free(mem->exclude);
    free(mem->conds);
    free(mem->strings);
    memset(mem, 0, sizeof *mem);
}

/* "com.shop.Cart.add" or "com/shop/Cart.add(I)V": class (internal), method, descriptor. */
static int parse_method(const char *s, cmr_cfg_diag_mem_t *mem, char *err, size_t errlen)
{
    const char *paren = strchr(s, '(');
    size_t head = paren ? (size_t)(paren - s) : strlen(s);
    const char *dot = NULL;
    for (const char *p = s; p < s + head; p++)
        if (*p == '.')
            dot = p;
    if (!dot || dot == s || dot + 1 == s + head || (size_t)(dot - s) >= sizeof mem->class_name ||
        (size_t)(s + head - dot - 1) >= sizeof mem->method_name || (paren && strlen(paren) >= sizeof mem->descriptor) ||
        (paren && !strchr(paren, ')'))) {
        snprintf(err, errlen,
                 "--method wants Class.method or Class.method(descriptor), e.g. com.shop.CheckoutService.checkout, "
                 "not \"%s\"",
                 s);
        return -1;
    }
    snprintf(mem->class_name, sizeof mem->class_name, "%.*s", (int)(dot - s), s);
    for (char *c = mem->class_name; *c; c++)
        if (*c == '.')
            *c = '/';
    snprintf(mem->method_name, sizeof mem->method_name, "%.*s", (int)(s + head - dot - 1), dot + 1);
    snprintf(mem->descriptor, sizeof mem->descriptor, "%s", paren ? paren : "");
    return 0;
}

/* --- exclude entries: class-name prefixes and methods ------------------------------------ */

/* One JVM field type at p (B C D F I J S Z, Lname;, [type): the end of it, or NULL. */
static const char *field_type(const char *p)
{
    for (int dims = 0; *p == '['; p++)
        if (++dims > 255)
            return NULL;
    if (*p && strchr("BCDFIJSZ", *p))
        return p + 1;
    if (*p != 'L')
        return NULL;
    const char *q = ++p;
    for (; *q && *q != ';'; q++)
        if (strchr(".[()<>", *q) || (*q == '/' && (q == p || q[1] == '/' || q[1] == ';')) || (unsigned char)*q <= ' ')
            return NULL;
    return *q == ';' && q > p ? q + 1 : NULL;
}

/* "(" field types ")" and a field type or V, nothing after. */
static bool method_descriptor_valid(const char *d)
{
    if (*d++ != '(')
        return false;
    while (*d != ')')
        if (!(d = field_type(d)))
            return false;
    d++;
    if (*d == 'V')
        return d[1] == '\0';
    d = field_type(d);
    return d && *d == '\0';
}

/* Whether an entry of a diagnosis' exclude list (the wire form) names a method. */
static bool entry_names_method(const char *e)
{
    return strchr(e, '.') != NULL;
}

/* Whether method entry e names an overload of cls.name (cls internal; "" never). */
static bool names_method(const char *cls, const char *name, const char *e)
{
    const char *paren = strchr(e, '(');
    size_t clen = strlen(cls), head = paren ? (size_t)(paren - e) : strlen(e);
    return clen && !strncmp(e, cls, clen) && e[clen] == '.' && head == clen + 1 + strlen(name) &&
           !strncmp(e + clen + 1, name, head - clen - 1);
}

/* Whether a --exclude entry names a method (see cmr_cfg_diag_from_options). */
static bool entry_is_method(const char *s)
{
    if (strchr(s, '('))
        return true;
    if (!strchr(s, '.'))
        return false;
    if (strchr(s, '/'))
        return true;
    const char *last = strrchr(s, '.'), *prev = last;
    while (prev > s && prev[-1] != '.')
        prev--;
    return prev < last && *prev >= 'A' && *prev <= 'Z' && !(last[1] >= 'A' && last[1] <= 'Z');
}

/* A method entry in place (its length does not change): the class part in internal form,
 * checked. 0, or -1 with err. */
static int canon_method_entry(char *s, char *err, size_t errlen)
{
    char *paren = strchr(s, '(');
    size_t head = paren ? (size_t)(paren - s) : strlen(s);
    char *dot = NULL;
    for (char *p = s; p < s + head; p++)
        if (*p == '.')
            dot = p;
    const char *why = NULL;
    if (!dot || dot == s || dot + 1 == s + head)
        why = "wants Class.method or Class.method(descriptor), e.g. com.shop.Cart.add or com.shop.Cart.add(I)V";
    else if ((size_t)(dot - s) >= 1024 || (size_t)(s + head - dot - 1) >= 256 || (paren && strlen(paren) >= 1024))
        why = "is too long";
    if (!why) {
        for (const char *c = s; c < dot && !why; c++) /* '.' and '/' both separate packages */
            if (strchr(";[()<>", *c) || (unsigned char)*c <= ' ' ||
                ((*c == '/' || *c == '.') && (c == s || c[1] == '/' || c[1] == '.')))
                why = "has no valid class name before the method's name";
        bool special = (size_t)(s + head - dot - 1) == strlen("<init>") && !strncmp(dot + 1, "<init>", 6);
        special |= (size_t)(s + head - dot - 1) == strlen("<clinit>") && !strncmp(dot + 1, "<clinit>", 8);
        for (const char *c = dot + 1; c < s + head && !why && !special; c++)
            if (strchr(".;[/<>", *c) || (unsigned char)*c <= ' ')
                why = "has no valid method name";
        if (!why && paren && !method_descriptor_valid(paren))
            why = "has a descriptor that is not a JVM method descriptor, e.g. (ILjava/lang/String;)V";
    }
    if (why) {
        snprintf(err, errlen, "method \"%s\" %s", s, why);
        return -1;
    }
    for (char *c = s; c < dot; c++)
        if (*c == '.')
            *c = '/';
    return 0;
}

int cmr_cfg_diag_method_entry(const char *method, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!method || strlen(method) >= outlen) {
        snprintf(err, errlen, "method \"%.200s\" is too long", method ? method : "");
        return CMR_CFG_DIAG_BAD;
    }
    snprintf(out, outlen, "%s", method);
    return canon_method_entry(out, err, errlen) == 0 ? 0 : CMR_CFG_DIAG_BAD;
}

/* Comma-separated hex agent ids into 8-byte big-endian entries. */
static int parse_agents(const char *s, cmr_buf_t *out, char *err, size_t errlen)
{
    for (const char *p = s; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        uint64_t agent;
        uint8_t raw[8];
        if (cmr_id64_parse(p, len, &agent) != 0) {
            snprintf(err, errlen, "--agent takes agent ids of 16 hex digits, comma-separated (cmr-ingest agents)");
            return -1;
        }
        cmr_put_be64(raw, agent);
        cmr_buf_put(out, raw, 8);
        p = comma ? comma + 1 : NULL;
    }
    return cmr_buf_ok(out) ? 0 : -1;
}

/* judged: the agent can judge it when the anchor is entered (the request that began the
 * thread's segment); the others are not captured in the JVM yet and are refused rather
 * than accepted and never met. */
static const struct {
    cmr_diag_condition_kind_t kind; /* named by cmr_diag_condition_name */
    bool named;
    bool judged;
} cond_kinds[] = {
    {CMR_DIAG_HTTP_METHOD, false, true}, {CMR_DIAG_HTTP_PATH, false, true},     {CMR_DIAG_HTTP_STATUS, false, false},
    {CMR_DIAG_HTTP_HEADER, true, true},  {CMR_DIAG_HTTP_PARAMETER, true, true}, {CMR_DIAG_SQL, false, false},
    {CMR_DIAG_ARGUMENT, true, true},
};

/* Splits a comma-separated list in place (the copy in mem->strings); returns the count. */
static size_t split_list(char *s, char **items, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        items[n++] = t;
    return n;
}

/* --when KIND[:NAME]=GLOB,...: http.method=POST, http.path=/checkout*, http.status=5*,
 * http.header:X-Tenant=acme, http.param:sku=42*, sql=select*orders*, arg:0=7. */
static int parse_conditions(char *s, cmr_cfg_diag_mem_t *mem, char *err, size_t errlen)
{
    char *items[33];
    size_t n = split_list(s, items, 33);
    if (n > 32) {
        snprintf(err, errlen, "--when: at most 32 conditions");
        return -1;
    }
    mem->conds = calloc(n ? n : 1, sizeof *mem->conds);
    if (!mem->conds)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char *eq = strchr(items[i], '=');
        if (!eq) {
            snprintf(err, errlen, "--when: \"%s\" is not KIND[:NAME]=GLOB", items[i]);
            return -1;
        }
        *eq = '\0';
        char *colon = strchr(items[i], ':');
        if (colon)
            *colon = '\0';
        size_t k = 0;
        while (k < sizeof cond_kinds / sizeof cond_kinds[0] &&
               strcmp(cmr_diag_condition_name(cond_kinds[k].kind), items[i]))
            k++;
        if (k == sizeof cond_kinds / sizeof cond_kinds[0] || cond_kinds[k].named != (colon != NULL) ||
            (colon && !colon[1])) {
            snprintf(err, errlen,
                     "--when: \"%s\": kinds are http.method, http.path, http.status, sql (KIND=GLOB) and "
                     "http.header, http.param, arg (KIND:NAME=GLOB)",
                     items[i]);
            return -1;
        }
        if (!cond_kinds[k].judged) {
            snprintf(err, errlen,
                     "--when: \"%s\": the agents cannot judge this condition when the method is entered yet "
                     "(http.method, http.path, http.header, http.param and arg:N they can; "
                     "cmr-ingest diagnosis ID --http-status filters its report by status)",
                     items[i]);
            return -1;
        }
        if (cond_kinds[k].kind == CMR_DIAG_ARGUMENT) {
            const char *n = colon + 1;
            bool other = false;
            for (size_t c = 0; c < mem->nconds; c++)
                other |= mem->conds[c].kind == CMR_DIAG_ARGUMENT && strcmp(mem->conds[c].name, n) != 0;
            if (n[0] < '0' || n[0] > '3' || n[1] || other) {
                snprintf(err, errlen,
                         "--when: \"%s\": arg:N takes the index of one of the method's first four parameters "
                         "(0-3), the same in every arg condition; the parameter must be an object (a String, a "
                         "number, an enum ...)",
                         items[i]);
                return -1;
            }
        }
        if (strpbrk(eq + 1, "\t\r\n") || (colon && strpbrk(colon + 1, "\t\r\n"))) {
            snprintf(err, errlen, "--when: \"%s\": no tabs or line ends in a condition", items[i]);
            return -1;
        }
        mem->conds[mem->nconds++] = (cmr_diag_condition_t){cond_kinds[k].kind, colon ? colon + 1 : "", eq + 1};
    }
    return 0;
}

static int get_duration(const cmr_conf_t *conf, const char *key, int64_t def, int64_t min, int64_t max, int64_t *out,
                        char *err, size_t errlen)
{
    const char *s = cmr_conf_get(conf, key, NULL);
    *out = def;
    if (s && (cmr_duration_parse_ms(s, out) != 0 || *out < min || *out > max)) {
        snprintf(err, errlen, "%s: \"%s\" is not a duration between %" PRId64 " ms and %" PRId64 " ms", key, s, min,
                 max);
        return -1;
    }
    return 0;
}

int cmr_cfg_diag_from_options(const cmr_conf_t *conf, const char *author, cmr_diagnosis_t *d, cmr_cfg_diag_mem_t *mem,
                              char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    memset(mem, 0, sizeof *mem);
    const char *env = cmr_conf_get(conf, "diag.env", NULL), *method = cmr_conf_get(conf, "diag.method", NULL);
    if (!env || !*env || !method) {
        snprintf(err, errlen, "diagnose start needs --env ENV and --method Class.method");
        return -1;
    }
    if (parse_method(method, mem, err, errlen) != 0 ||
        parse_agents(cmr_conf_get(conf, "diag.agents", ""), &mem->agents, err, errlen) != 0)
        return -1;
    const char *exclude = cmr_conf_get(conf, "diag.exclude", ""), *when = cmr_conf_get(conf, "diag.when", "");
    size_t elen = strlen(exclude), wlen = strlen(when);
    mem->strings = malloc(elen + wlen + 2);
    mem->exclude = calloc(CMR_CFG_DIAG_MAX_EXCLUDE + 1, sizeof *mem->exclude);
    if (!mem->strings || !mem->exclude)
        return -1;
    memcpy(mem->strings, exclude, elen + 1);
    memcpy(mem->strings + elen + 1, when, wlen + 1);
    mem->nexclude = split_list(mem->strings, mem->exclude, CMR_CFG_DIAG_MAX_EXCLUDE + 1);
    if (mem->nexclude > CMR_CFG_DIAG_MAX_EXCLUDE) {
        snprintf(err, errlen, "--exclude: at most %d entries", CMR_CFG_DIAG_MAX_EXCLUDE);
        return -1;
    }
    for (size_t i = 0; i < mem->nexclude; i++) {
        char why[1200];
        if (!entry_is_method(mem->exclude[i])) {
            for (char *c = mem->exclude[i]; *c; c++)
                if (*c == '.')
                    *c = '/';
        } else if (canon_method_entry(mem->exclude[i], why, sizeof why) != 0) {
            snprintf(err, errlen, "--exclude: %s", why);
            return -1;
        } else if (names_method(mem->class_name, mem->method_name, mem->exclude[i])) {
            snprintf(err, errlen, "--exclude: %s is the diagnosed method itself", mem->exclude[i]);
            return -1;
        }
    }
    if (parse_conditions(mem->strings + elen + 1, mem, err, errlen) != 0)
        return -1;
    int64_t depth, max_hits, ttl, normal;
    bool include_jdk;
    if (cmr_conf_get_int(conf, "diag.depth", 3, 1, 10, &depth, err, errlen) ||
        cmr_conf_get_int(conf, "diag.max_hits", 0, 0, INT64_MAX, &max_hits, err, errlen) ||
        cmr_conf_get_bool(conf, "diag.include_jdk", false, &include_jdk, err, errlen) ||
        get_duration(conf, "diag.ttl", 600000, 1000, MAX_TTL_MS, &ttl, err, errlen) ||
        get_duration(conf, "diag.until_normal", 0, 0, MAX_TTL_MS, &normal, err, errlen))
        return -1;
    const char *budget = cmr_conf_get(conf, "diag.budget", "0");
    char *end;
    double pct = strtod(budget, &end);
    if (end == budget || (*end && strcmp(end, "%")) || !(pct >= 0 && pct <= 100)) {
        snprintf(err, errlen, "--budget is a share of the selected method's time, 0..100 (e.g. 2%%), not \"%s\"",
                 budget);
        return -1;
    }
    const char *trace = cmr_conf_get(conf, "diag.trace", "");
    uint8_t raw[16];
    if (*trace && (strlen(trace) != 32 || cmr_unhex(trace, raw, 16) != 0)) {
        snprintf(err, errlen, "--trace is a trace id of 32 hex digits");
        return -1;
    }
    uint8_t rnd[8];
    if (cmr_random_bytes(rnd, sizeof rnd) != 0) {
        snprintf(err, errlen, "no randomness for the diagnosis id");
        return -1;
    }
    cmr_hex(rnd, 8, mem->id);
    int64_t now = cmr_wall_ms();
    *d = (cmr_diagnosis_t){
        .id = mem->id,
        .revision = 1,
        .environment_id = (char *)env,
        .agents = {mem->agents.data, mem->agents.len},
        .method_id = *mem->descriptor ? (int64_t)cmr_method_id(mem->class_name, mem->method_name, mem->descriptor) : 0,
        .class_name = mem->class_name,
        .method_name = mem->method_name,
        .descriptor = mem->descriptor,
        .depth = (int32_t)depth,
        .include_jdk = include_jdk,
        .exclude = {mem->exclude, mem->nexclude},
        .conditions = {mem->conds, mem->nconds},
        .ttl_ms = ttl,
        .max_hits = max_hits,
        .overhead_budget_pct = pct,
        .end_after_normal_ms = normal,
        .state = CMR_DIAG_ACTIVE,
        .end_reason = CMR_DIAG_END_NONE,
        .cause = CMR_DIAG_CAUSE_USER,
        .rule = "",
        .trace_id = (char *)trace,
        .author = (char *)author,
        .started_ms = now,
        .time_ms = now,
    };
    return 0;
}

/* --- reading and writing the topic ------------------------------------------------------ */

static void apply_diagnosis_record(const cmr_reader_rec_t *rec, void *ud)
{
    char err[512];
    if (cmr_diagnoses_apply(ud, rec->payload, rec->len, err, sizeof err) < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_diagnosis", "partition=%d offset=%" PRId64 " error=\"%s\"", rec->partition,
                rec->offset, err);
}

/* Reads cmr.diagnoses to its end into a new projection. NULL with the reason in err. */
static cmr_diagnoses_t *load_err(const cmr_conf_t *conf, char *err, size_t errlen)
{
    cmr_diagnoses_t *s = cmr_diagnoses_new();
    if (!s)
        snprintf(err, errlen, "out of memory");
    else if (cmr_cfg_read_topic_err(conf, CMR_TOPIC_DIAGNOSES, true, apply_diagnosis_record, s, err, errlen) != 0) {
        cmr_diagnoses_free(s);
        s = NULL;
    }
    return s;
}

/* Reads cmr.diagnoses to its end into a new projection. NULL with the reason on stderr. */
static cmr_diagnoses_t *load(const cmr_conf_t *conf)
{
    char err[1100];
    cmr_diagnoses_t *s = load_err(conf, err, sizeof err);
    if (!s)
        fprintf(stderr, "cmr-config: %s\n", err);
    return s;
}

/* Writes one revision and waits for the cluster to have it. 0 or -1 (err). */
static int publish(const cmr_conf_t *conf, const cmr_diagnosis_t *d, char *err, size_t errlen)
{
    char why[512] = "";
    cmr_producer_t *p = cmr_producer_new(conf, "cmr-config-diagnose", NULL, NULL, why, sizeof why);
    int rc = p && cmr_producer_send(p, CMR_MSG_DIAGNOSIS, d, NULL, NULL, why, sizeof why) == CMR_SEND_OK ? 0 : -1;
    if (rc == 0 && cmr_producer_flush(p, 30000) != 0) {
        snprintf(why, sizeof why, "not acknowledged within 30 s");
        rc = -1;
    }
    if (rc)
        snprintf(err, errlen, "could not write the diagnosis to %s: %s", cmr_topic_name(CMR_TOPIC_DIAGNOSES),
                 p ? why : "no producer");
    if (p)
        cmr_producer_destroy(p, 5000);
    return rc;
}

/* The revision after d: ended for `reason` at now, by `author`. */
static cmr_diagnosis_t ended(const cmr_diagnosis_t *d, cmr_diag_end_reason_t reason, const char *author, int64_t now)
{
    cmr_diagnosis_t e = *d;
    e.revision = d->revision + 1;
    e.state = CMR_DIAG_ENDED;
    e.end_reason = reason;
    e.ended_ms = now;
    e.time_ms = now;
    e.author = (char *)author;
    return e;
}

/* --- changing diagnoses -------------------------------------------------------------------- */

/* The method part of a method entry: class "." name, without the descriptor. */
static size_t entry_head(const char *e)
{
    const char *paren = strchr(e, '(');
    return paren ? (size_t)(paren - e) : strlen(e);
}

/* Whether method entry e names diagnosis d's selected method (one of its overloads). */
static bool names_selected(const cmr_diagnosis_t *d, const char *e)
{
    return d->class_name && d->method_name && names_method(d->class_name, d->method_name, e);
}

/* Whether entry a (a method, every overload: no descriptor) covers method entry b. */
static bool covers(const char *a, const char *b)
{
    size_t head = entry_head(b);
    return !strchr(a, '(') && strlen(a) == head && !strncmp(a, b, head);
}

int cmr_cfg_diag_revise_exclude(const cmr_diagnosis_t *cur, const char *const *add, size_t nadd,
                                const char *const *remove, size_t nremove, const char *author, int64_t now_ms,
                                cmr_diagnosis_t *next, cmr_cfg_diag_mem_t *mem, char *err, size_t errlen)
{
    memset(mem, 0, sizeof *mem);
    *next = *cur;
    if (cur->state != CMR_DIAG_ACTIVE) {
        snprintf(err, errlen, "diagnosis %s has ended already (%s)", cur->id,
                 cmr_diag_end_reason_name(cur->end_reason));
        return CMR_CFG_DIAG_ENDED;
    }
    /* the methods in their wire form, one block: add's then remove's */
    size_t n = nadd + nremove;
    mem->strings = malloc(n ? n * CMR_CFG_DIAG_ENTRY_MAX : 1);
    mem->exclude = calloc(cur->exclude.count + nadd + 1, sizeof *mem->exclude);
    if (!mem->strings || !mem->exclude) {
        snprintf(err, errlen, "out of memory");
        return CMR_CFG_DIAG_BAD;
    }
    for (size_t i = 0; i < n; i++) {
        char *e = mem->strings + i * CMR_CFG_DIAG_ENTRY_MAX;
        if (cmr_cfg_diag_method_entry(i < nadd ? add[i] : remove[i - nadd], e, CMR_CFG_DIAG_ENTRY_MAX, err, errlen))
            return CMR_CFG_DIAG_BAD;
        if (i < nadd && names_selected(cur, e)) {
            snprintf(err, errlen, "%s is the diagnosed method itself (stop the diagnosis instead)", add[i]);
            return CMR_CFG_DIAG_BAD;
        }
    }
    char **l = mem->exclude;
    size_t nl = 0;
    bool changed = false;
    for (size_t i = 0; i < cur->exclude.count; i++)
        l[nl++] = cur->exclude.items[i];
    for (size_t i = 0; i < nremove; i++) {
        const char *e = mem->strings + (nadd + i) * CMR_CFG_DIAG_ENTRY_MAX;
        size_t k = 0;
        const char *whole = NULL; /* the entry of every overload that covers e */
        for (size_t j = 0; j < nl; j++) {
            bool gone = entry_names_method(l[j]) && (!strcmp(l[j], e) || covers(e, l[j]));
            if (!gone && entry_names_method(l[j]) && covers(l[j], e))
                whole = l[j];
            if (gone)
                changed = true;
            else
                l[k++] = l[j];
        }
        if (k == nl && whole) {
            snprintf(err, errlen,
                     "%s is excluded with every overload (%s): include that, then exclude the overloads to keep out",
                     remove[i], whole);
            return CMR_CFG_DIAG_BAD;
        }
        nl = k;
    }
    for (size_t i = 0; i < nadd; i++) {
        char *e = mem->strings + i * CMR_CFG_DIAG_ENTRY_MAX;
        bool have = false;
        size_t k = 0;
        for (size_t j = 0; j < nl; j++) {
            bool method = entry_names_method(l[j]);
            have |= method && (!strcmp(l[j], e) || covers(l[j], e));
            if (method && !have && covers(e, l[j]))
                changed = true; /* an overload of the method now excluded whole */
            else
                l[k++] = l[j];
        }
        nl = k;
        if (!have) {
            l[nl++] = e;
            changed = true;
        }
    }
    if (!changed)
        return CMR_CFG_DIAG_UNCHANGED;
    if (nl > CMR_CFG_DIAG_MAX_EXCLUDE) {
        snprintf(err, errlen, "a diagnosis excludes at most %d classes and methods", CMR_CFG_DIAG_MAX_EXCLUDE);
        return CMR_CFG_DIAG_BAD;
    }
    mem->nexclude = nl;
    next->exclude = (cmr_strings_t){l, nl};
    next->revision = cur->revision + 1;
    next->author = (char *)(author ? author : "");
    next->time_ms = now_ms;
    return 0;
}

int cmr_cfg_diag_start(const cmr_conf_t *conf, const cmr_diagnosis_t *d, char *err, size_t errlen)
{
    if (!d->id || !cmr_diag_id_valid(d->id) || d->revision != 1 || d->state != CMR_DIAG_ACTIVE || !d->environment_id ||
        !d->environment_id[0] || !d->class_name || !d->method_name || !d->descriptor) {
        snprintf(err, errlen, "not a new active diagnosis (an id of 16 hex digits, revision 1, an environment)");
        return CMR_CFG_DIAG_BAD;
    }
    cmr_diagnoses_t *s = load_err(conf, err, errlen);
    if (!s)
        return CMR_CFG_DIAG_UNREADABLE;
    int rc = 0;
    for (size_t i = 0; i < cmr_diagnoses_count(s) && rc == 0; i++) {
        const cmr_diagnosis_t *o = cmr_diagnoses_at(s, i);
        if (o->state == CMR_DIAG_ACTIVE && !strcmp(o->environment_id, d->environment_id) &&
            !strcmp(o->class_name, d->class_name) && !strcmp(o->method_name, d->method_name) &&
            !strcmp(o->descriptor, d->descriptor)) {
            snprintf(err, errlen, "diagnosis %s already looks into this method (stop it first)", o->id);
            rc = CMR_CFG_DIAG_CONFLICT;
        }
    }
    if (rc == 0 && publish(conf, d, err, errlen) != 0)
        rc = CMR_CFG_DIAG_PUBLISH;
    cmr_diagnoses_free(s);
    return rc;
}

/* Reads cmr.diagnoses and finds diagnosis id: 0 with *s (the caller frees it) and *d, or
 * BAD / UNREADABLE / NOT_FOUND with err (*s NULL). */
static int load_one(const cmr_conf_t *conf, const char *id, cmr_diagnoses_t **s, const cmr_diagnosis_t **d, char *err,
                    size_t errlen)
{
    *s = NULL;
    *d = NULL;
    if (!id || !cmr_diag_id_valid(id)) {
        snprintf(err, errlen, "a diagnosis id is 16 hex digits (cmr-config diagnose list)");
        return CMR_CFG_DIAG_BAD;
    }
    if (!(*s = load_err(conf, err, errlen)))
        return CMR_CFG_DIAG_UNREADABLE;
    if ((*d = cmr_diagnoses_get(*s, id)) != NULL)
        return 0;
    snprintf(err, errlen, "no diagnosis %s", id);
    cmr_diagnoses_free(*s);
    *s = NULL;
    return CMR_CFG_DIAG_NOT_FOUND;
}

int cmr_cfg_diag_stop(const cmr_conf_t *conf, const char *id, const char *author, char *err, size_t errlen)
{
    cmr_diagnoses_t *s;
    const cmr_diagnosis_t *d;
    int rc = load_one(conf, id, &s, &d, err, errlen);
    if (rc != 0)
        return rc;
    if (d->state != CMR_DIAG_ACTIVE) {
        snprintf(err, errlen, "diagnosis %s has ended already (%s)", d->id, cmr_diag_end_reason_name(d->end_reason));
        rc = CMR_CFG_DIAG_ENDED;
    } else {
        cmr_diagnosis_t e = ended(d, CMR_DIAG_END_STOPPED, author, cmr_wall_ms());
        if (publish(conf, &e, err, errlen) != 0)
            rc = CMR_CFG_DIAG_PUBLISH;
    }
    cmr_diagnoses_free(s);
    return rc;
}

int cmr_cfg_diag_exclude(const cmr_conf_t *conf, const char *id, const char *const *add, size_t nadd,
                         const char *const *remove, size_t nremove, const char *author, int64_t *revision, char *err,
                         size_t errlen)
{
    cmr_diagnoses_t *s;
    const cmr_diagnosis_t *d;
    int rc = load_one(conf, id, &s, &d, err, errlen);
    if (rc != 0)
        return rc;
    cmr_diagnosis_t next;
    cmr_cfg_diag_mem_t mem;
    rc = cmr_cfg_diag_revise_exclude(d, add, nadd, remove, nremove, author, cmr_wall_ms(), &next, &mem, err, errlen);
    if (rc == CMR_CFG_DIAG_UNCHANGED)
        snprintf(err, errlen, "diagnosis %s: nothing changes (revision %" PRId64 " stays)", d->id, d->revision);
    if (rc == 0 && publish(conf, &next, err, errlen) != 0)
        rc = CMR_CFG_DIAG_PUBLISH;
    if (revision && (rc == 0 || rc == CMR_CFG_DIAG_UNCHANGED))
        *revision = next.revision;
    cmr_cfg_diag_mem_free(&mem);
    cmr_diagnoses_free(s);
    return rc;
}

/* --- the commands ------------------------------------------------------------------------ */

static void when_text(int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void method_text(const cmr_diagnosis_t *d, char *buf, size_t len)
{
    if (*d->class_name)
        cmr_diag_method_text(d->class_name, d->method_name, d->descriptor, buf, len);
    else
        snprintf(buf, len, "method#%016" PRIx64, (uint64_t)d->method_id);
}

static void list_line(FILE *out, const cmr_diagnosis_t *d, int64_t now)
{
    char started[32], method[1200], status[64];
    when_text(d->started_ms, started, sizeof started);
    method_text(d, method, sizeof method);
    if (d->state == CMR_DIAG_ACTIVE)
        snprintf(status, sizeof status, "active, %" PRId64 "s left", (d->started_ms + d->ttl_ms - now) / 1000);
    else
        snprintf(status, sizeof status, "ended: %s", cmr_diag_end_reason_name(d->end_reason));
    bool threshold = d->cause == CMR_DIAG_CAUSE_THRESHOLD;
    fprintf(out, "%s  %-28s %s  %-12s %s%s%s%s\n", d->id, status, started, d->environment_id, method,
            threshold ? "  (threshold " : "", threshold ? d->rule : "", threshold ? ")" : "");
}

static void show(FILE *out, const cmr_diagnoses_t *s, const cmr_diagnosis_t *d)
{
    char method[1200], when[32];
    method_text(d, method, sizeof method);
    fprintf(out, "diagnosis %s: %s in environment %s\n", d->id, method, d->environment_id);
    fprintf(out,
            "  depth %d%s, time to live %" PRId64 " s, max hits %" PRId64 ", overhead budget %.2f%%, ends %" PRId64
            " s after back to normal%s\n",
            d->depth, d->include_jdk ? " (JDK included)" : "", d->ttl_ms / 1000, d->max_hits, d->overhead_budget_pct,
            d->end_after_normal_ms / 1000, d->end_after_normal_ms ? "" : " (never)");
    for (size_t i = 0; i < d->exclude.count; i++)
        fprintf(out, "  excluded%s: %s\n", entry_names_method(d->exclude.items[i]) ? " method" : "",
                d->exclude.items[i]);
    for (size_t i = 0; i < d->conditions.count; i++)
        fprintf(out, "  when: %s%s%s = %s\n", cmr_diag_condition_name(d->conditions.items[i].kind),
                *d->conditions.items[i].name ? ":" : "", d->conditions.items[i].name, d->conditions.items[i].pattern);
    if (d->agents.len)
        fprintf(out, "  agents: %zu\n", d->agents.len / 8);
    if (*d->trace_id)
        fprintf(out, "  from trace %s\n", d->trace_id);
    const cmr_diagnosis_t *revs[64];
    size_t n = cmr_diagnoses_history(s, d->id, revs, 64);
    for (size_t i = 0; i < n && i < 64; i++) {
        when_text(revs[i]->time_ms, when, sizeof when);
        fprintf(out, "  revision %" PRId64 "  %s  %s%s%s  by %s\n", revs[i]->revision, when,
                cmr_diag_state_name(revs[i]->state), revs[i]->state == CMR_DIAG_ENDED ? ": " : "",
                revs[i]->state == CMR_DIAG_ENDED ? cmr_diag_end_reason_name(revs[i]->end_reason) : "", revs[i]->author);
    }
}

/* --- the discovered trees (cmr.diagnosis-trees) ---------------------------------------- */

static const char *const node_status_names[] = {"found",   "not loaded", "jdk",   "excluded",
                                                "no code", "repeated",   "depth", "too many"};

typedef struct agent_trees {
    cmr_msg_t *items; /* the latest revision's tree per agent, in the order agents were met */
    size_t n, cap;
} agent_trees_t;

static void keep_tree(agent_trees_t *a, cmr_msg_t *m)
{
    const cmr_diagnosis_tree_t *t = &m->u.diagnosis_tree;
    for (size_t i = 0; i < a->n; i++)
        if (a->items[i].u.diagnosis_tree.agent_id == t->agent_id) {
            if (a->items[i].u.diagnosis_tree.revision > t->revision) {
                cmr_msg_free(m);
                return;
            }
            cmr_msg_free(&a->items[i]);
            a->items[i] = *m;
            return;
        }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        cmr_msg_t *p = realloc(a->items, cap * sizeof *p);
        if (!p) {
            cmr_msg_free(m);
            return;
        }
        a->items = p;
        a->cap = cap;
    }
    a->items[a->n++] = *m;
}

static void print_node(FILE *out, const cmr_diagnosis_tree_t *t, size_t i, int indent)
{
    const cmr_diag_node_t *x = &t->nodes.items[i];
    unsigned st = (unsigned)x->status;
    fprintf(out, "%*s%s.%s%s  %s  %s", indent, "", x->class_name, x->method_name, x->descriptor,
            cmr_diag_via_name(x->via),
            st < sizeof node_status_names / sizeof *node_status_names ? node_status_names[st] : "?");
    if (x->call_sites > 1)
        fprintf(out, "  (%d call sites)", x->call_sites);
    static const char *const probe_names[] = {"", "instrumented by the environment", "anchor", "conditional probes"};
    if ((unsigned)x->probe < sizeof probe_names / sizeof *probe_names && x->probe != CMR_DIAG_PROBE_NONE)
        fprintf(out, "  [%s]", probe_names[x->probe]);
    else if (x->status == CMR_DIAG_NODE_FOUND && x->note && x->note[0])
        fprintf(out, "  [not instrumented: %s]", x->note);
    else if (x->status == CMR_DIAG_NODE_EXCLUDED && x->note && x->note[0])
        fprintf(out, "  [%s]", x->note);
    fputc('\n', out);
    if (indent > 2 * 64)
        return; /* a damaged tree: parents come before their children, depth is bounded */
    for (size_t j = i + 1; j < t->nodes.count; j++)
        if (t->nodes.items[j].parent == (int32_t)i)
            print_node(out, t, j, indent + 2);
}

typedef struct trees_ctx {
    const char *id;
    agent_trees_t a;
} trees_ctx_t;

static void collect_tree(const cmr_reader_rec_t *rec, void *ud)
{
    trees_ctx_t *c = ud;
    size_t idlen = strlen(c->id);
    if (strncmp(rec->key, c->id, idlen) != 0 || rec->key[idlen] != '/')
        return;
    cmr_msg_t m;
    char err[256];
    if (cmr_msg_decode(rec->payload, rec->len, &m, err, sizeof err) != CMR_WIRE_OK)
        return;
    if (m.type == CMR_MSG_DIAGNOSIS_TREE && !strcmp(m.u.diagnosis_tree.diagnosis_id, c->id))
        keep_tree(&c->a, &m);
    else
        cmr_msg_free(&m);
}

/* Reads cmr.diagnosis-trees to its end and prints, per agent, the tree of diagnosis d's
 * latest revision the instrumenter made. 0, or -1 (stderr) when the topic cannot be read. */
static int show_trees(const cmr_conf_t *conf, FILE *out, const cmr_diagnosis_t *d)
{
    trees_ctx_t c = {.id = d->id};
    int rc = cmr_cfg_read_topic(conf, CMR_TOPIC_DIAGNOSIS_TREES, true, collect_tree, &c);
    agent_trees_t a = c.a;
    if (rc == 0 && !a.n)
        fprintf(out, "  no discovered callees yet\n");
    for (size_t i = 0; rc == 0 && i < a.n; i++) {
        const cmr_diagnosis_tree_t *t = &a.items[i].u.diagnosis_tree;
        char when[32];
        when_text(t->time_ms, when, sizeof when);
        fprintf(out, "  agent %016" PRIx64 " (revision %" PRId64 ", %s): ", (uint64_t)t->agent_id, t->revision, when);
        if (*t->error) {
            fprintf(out, "no tree: %s\n", t->error);
            continue;
        }
        fprintf(out, "%zu methods, %d classes read%s\n", t->nodes.count, t->classes_read,
                t->truncated ? ", truncated at the node bound" : "");
        for (size_t j = 0; j < t->nodes.count; j++)
            if (t->nodes.items[j].parent < 0)
                print_node(out, t, j, 4);
    }
    for (size_t i = 0; i < a.n; i++)
        cmr_msg_free(&a.items[i]);
    free(a.items);
    return rc;
}

static int run_diagnose(const cmr_conf_t *conf, int nargs, char **args, FILE *out, cmr_buf_t *who)
{
    const char *what = nargs ? args[0] : "";
    char err[512];
    if (!strcmp(what, "start") && nargs == 1) {
        cmr_diagnosis_t d;
        cmr_cfg_diag_mem_t mem;
        if (cmr_cfg_diag_from_options(conf, cmr_cfg_author(conf, who), &d, &mem, err, sizeof err) != 0) {
            fprintf(stderr, "cmr-config: %s\n", err);
            cmr_cfg_diag_mem_free(&mem);
            return 2;
        }
        int rc = cmr_cfg_diag_start(conf, &d, err, sizeof err);
        if (rc == 0)
            fprintf(out, "started diagnosis %s\n", d.id);
        else
            fprintf(stderr, "cmr-config: %s\n", err);
        cmr_cfg_diag_mem_free(&mem);
        return rc == 0 ? 0 : rc == CMR_CFG_DIAG_BAD ? 2 : 1;
    }
    if (!strcmp(what, "stop") && nargs == 2) {
        int rc = cmr_cfg_diag_stop(conf, args[1], cmr_cfg_author(conf, who), err, sizeof err);
        if (rc == 0)
            fprintf(out, "stopped diagnosis %s\n", args[1]);
        else
            fprintf(stderr, "cmr-config: %s\n", err);
        return rc == 0 ? 0 : rc == CMR_CFG_DIAG_BAD ? 2 : 1;
    }
    if ((!strcmp(what, "exclude") || !strcmp(what, "include")) && nargs >= 3) {
        const char *const *methods = (const char *const *)args + 2;
        size_t n = (size_t)nargs - 2;
        bool ex = what[0] == 'e';
        int64_t revision = 0;
        int rc = cmr_cfg_diag_exclude(conf, args[1], ex ? methods : NULL, ex ? n : 0, ex ? NULL : methods, ex ? 0 : n,
                                      cmr_cfg_author(conf, who), &revision, err, sizeof err);
        if (rc == 0) {
            fprintf(out, "diagnosis %s revision %" PRId64 ": %s", args[1], revision,
                    ex ? "excluded" : "included again");
            for (size_t i = 0; i < n; i++)
                fprintf(out, " %s", methods[i]);
            fputc('\n', out);
        } else if (rc == CMR_CFG_DIAG_UNCHANGED) {
            fprintf(out, "%s\n", err);
        } else {
            fprintf(stderr, "cmr-config: %s\n", err);
        }
        return rc == 0 || rc == CMR_CFG_DIAG_UNCHANGED ? 0 : rc == CMR_CFG_DIAG_BAD ? 2 : 1;
    }
    if ((!strcmp(what, "list") && nargs == 1) || (!strcmp(what, "show") && nargs == 2)) {
        cmr_diagnoses_t *s = load(conf);
        if (!s)
            return 1;
        int rc = 0;
        if (what[0] == 'l') {
            bool all;
            cmr_conf_get_bool(conf, "diag.all", false, &all, err, sizeof err);
            int64_t now = cmr_wall_ms();
            size_t shown = 0;
            for (size_t i = 0; i < cmr_diagnoses_count(s); i++) {
                const cmr_diagnosis_t *d = cmr_diagnoses_at(s, i);
                if (all || d->state == CMR_DIAG_ACTIVE) {
                    list_line(out, d, now);
                    shown++;
                }
            }
            if (!shown)
                fprintf(out, "no %sdiagnosis%s\n", all ? "" : "active ", all ? "" : " (--all lists the ended ones)");
        } else {
            const cmr_diagnosis_t *d = cmr_diag_id_valid(args[1]) ? cmr_diagnoses_get(s, args[1]) : NULL;
            if (d) {
                show(out, s, d);
                fprintf(out, "discovered callees (method, via, status):\n");
                if (show_trees(conf, out, d) != 0)
                    rc = 1;
            } else {
                fprintf(stderr, "cmr-config: no diagnosis %s\n", args[1]);
                rc = 1;
            }
        }
        cmr_diagnoses_free(s);
        return rc;
    }
    fprintf(stderr, "cmr-config: diagnose start --env ENV --method Class.method [...] | stop ID | "
                    "exclude ID METHOD... | include ID METHOD... | list [--all] | show ID\n");
    return 2;
}

int cmr_cfg_cli_diagnose(const cmr_conf_t *conf, int nargs, char **args, FILE *out)
{
    cmr_buf_t who = {0}; /* the author text, when cmr_cfg_author builds it */
    int rc = run_diagnose(conf, nargs, args, out, &who);
    cmr_buf_free(&who);
    return rc;
}

/* --- the worker's steps ------------------------------------------------------------------- */

int cmr_cfg_diag_worker_init(cmr_cfg_diag_worker_t *w, const cmr_conf_t *conf, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    int64_t depth;
    if (cmr_conf_get_int(conf, "diag.auto.ttl_ms", 600000, 1000, MAX_TTL_MS, &w->auto_ttl_ms, err, errlen) ||
        cmr_conf_get_int(conf, "diag.auto.end_after_normal_ms", 60000, 0, MAX_TTL_MS, &w->auto_normal_ms, err,
                         errlen) ||
        cmr_conf_get_int(conf, "diag.auto.depth", 3, 1, 10, &depth, err, errlen))
        return -1;
    w->auto_depth = (int32_t)depth;
    w->state = cmr_diagnoses_new();
    return w->state ? 0 : -1;
}

void cmr_cfg_diag_worker_free(cmr_cfg_diag_worker_t *w)
{
    cmr_diagnoses_free(w->state);
    cmr_map_free(&w->normal_since);
    cmr_map_free(&w->abnormal);
    memset(w, 0, sizeof *w);
}

void cmr_cfg_diag_on_record(cmr_cfg_diag_worker_t *w, const void *payload, size_t len)
{
    char err[256];
    if (cmr_diagnoses_apply(w->state, payload, len, err, sizeof err) < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_diagnosis", "error=\"%s\"", err);
}

/* Writes a revision and applies it at once (the topic echoes it later; the same revision
 * is then ignored). */
static int write_revision(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, const cmr_diagnosis_t *d)
{
    char err[256];
    if (cmr_producer_send(p, CMR_MSG_DIAGNOSIS, d, NULL, NULL, err, sizeof err) != CMR_SEND_OK) {
        cmr_log(CMR_LOG_WARN, "config.diagnosis_not_sent", "id=%s error=\"%s\"", d->id, err);
        return 0;
    }
    cmr_diagnoses_apply_msg(w->state, d);
    cmr_log(CMR_LOG_INFO, d->state == CMR_DIAG_ACTIVE ? "config.diagnosis_started" : "config.diagnosis_ended",
            "id=%s environment=%s method_id=%016" PRIx64 " reason=%s", d->id, d->environment_id, (uint64_t)d->method_id,
            d->state == CMR_DIAG_ACTIVE ? "threshold" : cmr_diag_end_reason_name(d->end_reason));
    if (d->state == CMR_DIAG_ACTIVE)
        w->started++;
    else
        w->ended++;
    return 1;
}

/* The key of one abnormal series of a diagnosis: its id, '\n', the series' name (a method,
 * or a transaction named by its route: several routes can share a root method, and so one
 * diagnosis). len: the key's length, 0 when it does not fit. */
static size_t abnormal_key(char *k, size_t cap, const char *id, const char *subject)
{
    int n = snprintf(k, cap, "%s\n%s", id, subject ? subject : "");
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Whether any series of diagnosis id is abnormal still. */
static bool any_abnormal(cmr_cfg_diag_worker_t *w, const char *id)
{
    size_t it = 0, kl, il = strlen(id);
    const void *k;
    void *v;
    while (cmr_map_next(&w->abnormal, &it, &k, &kl, &v))
        if (kl > il && !memcmp(k, id, il) && ((const char *)k)[il] == '\n')
            return true;
    return false;
}

/* Forgets the abnormal series of diagnoses no longer active, whatever ended them (their
 * time, their hits, a person, this worker). */
static void prune_abnormal(cmr_cfg_diag_worker_t *w)
{
    char id[64], copy[1024];
    size_t it = 0, kl;
    const void *key;
    void *v;
    while (cmr_map_next(&w->abnormal, &it, &key, &kl, &v)) {
        const char *nl = memchr(key, '\n', kl);
        size_t il = nl ? (size_t)(nl - (const char *)key) : 0;
        if (il == 0 || il >= sizeof id)
            continue;
        memcpy(id, key, il);
        id[il] = '\0';
        const cmr_diagnosis_t *d = cmr_diagnoses_get(w->state, id);
        if ((d && d->state == CMR_DIAG_ACTIVE) || kl > sizeof copy)
            continue;
        memcpy(copy, key, kl); /* key is the map's, which the removal frees */
        cmr_map_del(&w->abnormal, copy, kl, NULL);
        it = 0; /* the walk starts again after a removal */
    }
}

int cmr_cfg_diag_on_threshold(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, const cmr_threshold_event_t *ev,
                              int64_t now_ms)
{
    const cmr_diagnosis_t *active = cmr_diagnoses_active_for(w->state, ev->environment_id, ev->subject_id);
    bool ours = active && active->cause == CMR_DIAG_CAUSE_THRESHOLD && !strcmp(active->rule, ev->rule);
    char akey[1024];
    size_t aklen = active ? abnormal_key(akey, sizeof akey, active->id, ev->subject_name) : 0;
    if (ev->state == CMR_THRESHOLD_NORMAL) {
        if (ours && aklen)
            cmr_map_del(&w->abnormal, akey, aklen, NULL);
        /* back to normal once every series of the rule that shares it is */
        if (ours && active->end_after_normal_ms > 0 && !any_abnormal(w, active->id))
            cmr_map_put(&w->normal_since, active->id, strlen(active->id), (void *)(uintptr_t)now_ms);
        return 0;
    }
    if (active) { /* abnormal again: it is not back to normal */
        if (ours && aklen)
            cmr_map_put(&w->abnormal, akey, aklen, NULL);
        cmr_map_del(&w->normal_since, active->id, strlen(active->id), NULL);
        return 0;
    }
    if (!ev->diagnose || strlen(ev->environment_id) > 128 || strlen(ev->rule) > 256)
        return 0;
    /* the same id for every worker that sees this event */
    char key[512], id[17];
    int klen = snprintf(key, sizeof key, "%s|%s|%016" PRIx64 "|%" PRId64, ev->environment_id, ev->rule,
                        (uint64_t)ev->subject_id, ev->window_end_ms);
    uint64_t h = cmr_hash_bytes(key, (size_t)klen);
    snprintf(id, sizeof id, "%016" PRIx64, h);
    if (cmr_diagnoses_get(w->state, id))
        return 0; /* started (and perhaps ended) before */
    char author[300];
    snprintf(author, sizeof author, "cmr-config (threshold %s)", ev->rule);
    /* the subject's name (Class.method(desc)), when it is the method the id names: the
     * diagnosis then reads by name (else the instrumenter finds the method by its id) */
    static cmr_cfg_diag_mem_t named; /* the worker's thread only; copied by the write */
    char perr[256];
    bool have_name = ev->subject_name && strchr(ev->subject_name, '(') &&
                     parse_method(ev->subject_name, &named, perr, sizeof perr) == 0 &&
                     cmr_method_id(named.class_name, named.method_name, named.descriptor) == (uint64_t)ev->subject_id;
    cmr_diagnosis_t d = {
        .id = id,
        .revision = 1,
        .environment_id = ev->environment_id,
        .method_id = ev->subject_id,
        .class_name = have_name ? named.class_name : "",
        .method_name = have_name ? named.method_name : "",
        .descriptor = have_name ? named.descriptor : "",
        .depth = w->auto_depth,
        .ttl_ms = w->auto_ttl_ms,
        .end_after_normal_ms = w->auto_normal_ms,
        .state = CMR_DIAG_ACTIVE,
        .end_reason = CMR_DIAG_END_NONE,
        .cause = CMR_DIAG_CAUSE_THRESHOLD,
        .rule = ev->rule,
        .trace_id = ev->example_traces.count ? ev->example_traces.items[0] : "",
        .author = author,
        .started_ms = now_ms,
        .time_ms = now_ms,
    };
    int rc = write_revision(w, p, &d);
    if (rc > 0 && (aklen = abnormal_key(akey, sizeof akey, id, ev->subject_name)))
        cmr_map_put(&w->abnormal, akey, aklen, NULL);
    return rc;
}

int cmr_cfg_diag_on_agent_status(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, const cmr_agent_status_t *st,
                                 int64_t now_ms)
{
    int n = 0;
    for (size_t i = 0; i < st->diagnoses.count; i++) {
        const cmr_diagnosis_run_t *r = &st->diagnoses.items[i];
        if (r->state != CMR_DIAG_ENDED || (r->end_reason != CMR_DIAG_END_HITS && r->end_reason != CMR_DIAG_END_BUDGET))
            continue;
        char id[17];
        snprintf(id, sizeof id, "%016" PRIx64, (uint64_t)r->id);
        const cmr_diagnosis_t *d = cmr_diagnoses_get(w->state, id);
        if (!d || d->state != CMR_DIAG_ACTIVE || strcmp(d->environment_id, st->environment_id) != 0)
            continue;
        char author[64];
        snprintf(author, sizeof author, "agent %016" PRIx64, (uint64_t)st->agent_id);
        cmr_diagnosis_t e = ended(d, r->end_reason, author, now_ms);
        n += write_revision(w, p, &e);
    }
    return n;
}

int cmr_cfg_diag_tick(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, int64_t now_ms)
{
    int n = 0;
    for (size_t i = 0; i < cmr_diagnoses_count(w->state); i++) {
        const cmr_diagnosis_t *d = cmr_diagnoses_at(w->state, i);
        if (d->state != CMR_DIAG_ACTIVE)
            continue;
        void *since = cmr_map_get(&w->normal_since, d->id, strlen(d->id));
        cmr_diag_end_reason_t why = CMR_DIAG_END_NONE;
        if (now_ms >= d->started_ms + d->ttl_ms)
            why = CMR_DIAG_END_TIME_TO_LIVE;
        else if (since && d->end_after_normal_ms > 0 && now_ms - (int64_t)(uintptr_t)since >= d->end_after_normal_ms)
            why = CMR_DIAG_END_BACK_TO_NORMAL;
        if (why == CMR_DIAG_END_NONE)
            continue;
        char author[64];
        snprintf(author, sizeof author, "cmr-config");
        cmr_diagnosis_t e = ended(d, why, author, now_ms);
        char id[17];
        snprintf(id, sizeof id, "%s", d->id); /* d moves when the state takes the new revision */
        n += write_revision(w, p, &e);
        cmr_map_del(&w->normal_since, id, strlen(id), NULL);
    }
    prune_abnormal(w);
    return n;
}
