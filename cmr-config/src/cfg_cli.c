/*
 * cfg_cli.c - apply / diff / list / show / delete / keygen (see cfg_cli.h).
 *
 * Ownership: every command loads its own state and frees it before returning.
 */
#include "cmr/cfg_cli.h"

#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/cfg_doc.h"
#include "cmr/reader.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/trust.h"
#include "cmr/wire.h"

int cmr_cfg_read_topic_err(const cmr_conf_t *conf, cmr_topic_t topic, bool ensure, cmr_cfg_record_fn *fn, void *ud,
                           char *err, size_t errlen)
{
    char why[512];
    int64_t timeout;
    if (cmr_conf_get_int(conf, "config.timeout_ms", 30000, 100, 3600000, &timeout, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    const char *name = cmr_topic_name(topic);
    const cmr_topic_layout_t *l = cmr_topic_layout(topic);
    if (ensure &&
        cmr_admin_ensure_topic(conf, name, l->partitions, -1, l->compacted, (int)timeout, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", name, why);
        return -1;
    }
    cmr_reader_t *r = cmr_reader_new(conf, name, 0, why, sizeof why);
    if (!r) {
        snprintf(err, errlen, "cannot read %s: %s", name, why);
        return -1;
    }
    int rc = 0;
    int64_t deadline = cmr_mono_ms() + timeout;
    while (rc == 0 && !cmr_reader_caught_up(r)) {
        cmr_reader_rec_t rec;
        int got = cmr_mono_ms() > deadline ? -1 : cmr_reader_poll(r, 200, &rec);
        if (got < 0) {
            snprintf(err, errlen, "could not read %s to its end within %" PRId64 " ms", name, timeout);
            rc = -1;
        } else if (got == 1) {
            fn(&rec, ud);
        }
    }
    cmr_reader_free(r);
    return rc;
}

int cmr_cfg_read_topic(const cmr_conf_t *conf, cmr_topic_t topic, bool ensure, cmr_cfg_record_fn *fn, void *ud)
{
    char err[1100];
    int rc = cmr_cfg_read_topic_err(conf, topic, ensure, fn, ud, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "cmr-config: %s\n", err);
    return rc;
}

static void apply_config_record(const cmr_reader_rec_t *rec, void *ud)
{
    char err[512];
    if (cmr_cfg_state_apply(ud, rec->payload, rec->len, NULL, err, sizeof err) < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_record", "partition=%d offset=%" PRId64 " error=\"%s\"", rec->partition,
                rec->offset, err);
}

/* Reads cmr.config to its end. NULL with the reason on eo ("cmr-config: ...": stderr for
 * the CLI, the answer for the web UI). */
static cmr_cfg_state_t *load_state(const cmr_conf_t *conf, FILE *eo)
{
    char err[1100];
    cmr_cfg_state_t *s = cmr_cfg_state_new();
    if (s && cmr_cfg_read_topic_err(conf, CMR_TOPIC_CONFIG, false, apply_config_record, s, err, sizeof err) != 0) {
        fprintf(eo, "cmr-config: %s\n", err);
        cmr_cfg_state_free(s);
        s = NULL;
    }
    return s;
}

const char *cmr_cfg_author(const cmr_conf_t *conf, cmr_buf_t *buf)
{
    const char *a = cmr_conf_get(conf, "config.author", NULL);
    if (a)
        return a;
    char host[256] = "?"; /* HOST_NAME_MAX is 64 */
    gethostname(host, sizeof host - 1);
    const char *user = getenv("USER");
    const struct passwd *pw = user && *user ? NULL : getpwuid(geteuid());
    cmr_buf_printf(buf, "%s@%s", user && *user ? user : pw && pw->pw_name ? pw->pw_name : "?", host);
    return cmr_buf_ok(buf) ? cmr_buf_str(buf) : "?";
}

/* --- the plan: what apply would publish --------------------------------------------- */

/* librdkafka refuses a record whose value, key and record-batch framing exceed
 * message.max.bytes; the framing of one record is under this. */
#define RECORD_OVERHEAD 128

typedef enum outcome {
    PLANNED,   /* not sent (yet) */
    PUBLISHED, /* delivered (and, in a transaction, committed) */
    FAILED,    /* certainly not published */
    UNKNOWN,   /* sent, but whether it is visible is unknown */
} outcome_t;

typedef struct change {
    cmr_config_change_t c;
    const char *what;  /* "created", "updated", "deleted" */
    int line;          /* in the file; 0 when none */
    cmr_buf_t payload; /* owned: the encoded change, exactly what is sent */
    char key[CMR_KEY_MAX];
    size_t key_len;
    int queued;            /* accepted by the producer */
    _Atomic int delivered; /* from the delivery report: 1 delivered, -1 failed, 0 none yet */
    outcome_t outcome;
    char why[320]; /* why it was not published */
} change_t;

typedef struct plan {
    change_t *items; /* owned */
    size_t n;
} plan_t;

static void plan_free(plan_t *plan)
{
    for (size_t i = 0; i < plan->n; i++)
        cmr_buf_free(&plan->items[i].payload);
    free(plan->items);
    memset(plan, 0, sizeof *plan);
}

static int mappings_equal(const cmr_agent_mapping_t *a, size_t na, const cmr_agent_mapping_t *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].agent_pattern, b[i].agent_pattern) || strcmp(a[i].address, b[i].address) ||
            strcmp(a[i].environment_id, b[i].environment_id))
            return 0;
    return 1;
}

/* Every mapping names an environment of the file or of the CMR. 0, or -1 (the reason on eo). */
static int check_mapping_targets(const cmr_cfg_state_t *s, const cmr_cfg_doc_t *doc, const char *path, FILE *eo)
{
    cmr_map_t in_file = {0}; /* the file's environment ids: linear in environments + mappings */
    int rc = 0;
    for (size_t j = 0; j < doc->n_envs && rc == 0; j++)
        if (cmr_map_put(&in_file, doc->envs[j].id, strlen(doc->envs[j].id), NULL) != 0) {
            fprintf(eo, "cmr-config: out of memory\n");
            rc = -1;
        }
    for (size_t i = 0; i < doc->n_mappings && rc == 0; i++) {
        const char *e = doc->mappings[i].environment_id;
        if (cmr_cfg_state_env(s, e, NULL) || cmr_map_has(&in_file, e, strlen(e)))
            continue;
        fprintf(eo,
                "cmr-config: %s:%d: mappings[%zu].environment: environment \"%s\" is neither in this file "
                "nor in the CMR (see 'cmr-config list')\n",
                path, doc->mapping_lines[i], i, e);
        rc = -1;
    }
    cmr_map_free(&in_file);
    return rc;
}

/* Checks the document against the state and lists the changes. -1 when rejected. */
static int make_plan(const cmr_cfg_state_t *s, const cmr_cfg_doc_t *doc, const char *path, const char *who,
                     plan_t *plan, FILE *eo)
{
    plan->items = calloc(doc->n_envs + 1, sizeof *plan->items);
    if (!plan->items) {
        fprintf(eo, "cmr-config: out of memory\n");
        return -1;
    }
    if (check_mapping_targets(s, doc, path, eo) != 0)
        return -1;
    int64_t t = cmr_wall_ms();
    for (size_t i = 0; i < doc->n_envs; i++) {
        const cmr_environment_t *cur = cmr_cfg_state_env(s, doc->envs[i].id, NULL);
        if (cur && cmr_cfg_env_equal(cur, &doc->envs[i]))
            continue;
        change_t *ch = &plan->items[plan->n++];
        ch->what = cur ? "updated" : "created";
        ch->line = doc->env_lines[i];
        ch->c = (cmr_config_change_t){
            .kind = CMR_CONFIG_ENVIRONMENT,
            .revision = cmr_cfg_state_key_revision(s, doc->envs[i].id) + 1,
            .time_ms = t,
            .author = (char *)who,
            .environment = &doc->envs[i],
        };
    }
    size_t ncur;
    const cmr_agent_mapping_t *cur = cmr_cfg_state_mappings(s, &ncur, NULL);
    if (doc->has_mappings && !mappings_equal(cur, ncur, doc->mappings, doc->n_mappings)) {
        change_t *ch = &plan->items[plan->n++];
        ch->what = "updated";
        ch->line = doc->n_mappings ? doc->mapping_lines[0] : 0;
        ch->c = (cmr_config_change_t){.kind = CMR_CONFIG_MAPPINGS,
                                      .revision = cmr_cfg_state_key_revision(s, "mappings") + 1,
                                      .time_ms = t,
                                      .author = (char *)who};
        ch->c.mappings.items = doc->mappings;
        ch->c.mappings.count = doc->n_mappings;
    }
    return 0;
}

/* Encodes every change and checks it fits one Kafka record (the wire's maximum, checked by
 * the encoder, and kafka.message.max.bytes, the producer's limit). Nothing is sent before
 * every change passed. Returns how many did not (their why says it, also on eo). */
static size_t validate_plan(const cmr_conf_t *conf, plan_t *plan, const char *path, FILE *eo)
{
    char err[256];
    int64_t kmax;
    if (cmr_conf_get_int(conf, "kafka.message.max.bytes", 16777216, 1000, 1000000000, &kmax, err, sizeof err) != 0) {
        fprintf(eo, "cmr-config: %s\n", err);
        kmax = 1000;
    }
    size_t bad = 0;
    for (size_t i = 0; i < plan->n; i++) {
        change_t *ch = &plan->items[i];
        if (cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, &ch->c, &ch->payload, err, sizeof err) != CMR_WIRE_OK)
            snprintf(ch->why, sizeof ch->why, "does not encode: %s", err);
        else if ((ch->key_len = cmr_msg_key(CMR_MSG_CONFIG_CHANGE, &ch->c, ch->key, sizeof ch->key),
                  ch->payload.len + ch->key_len + RECORD_OVERHEAD > (uint64_t)kmax))
            snprintf(ch->why, sizeof ch->why,
                     "too large: %zu bytes encoded, over the limit of %" PRId64
                     " bytes (kafka.message.max.bytes, less %d bytes of record framing)",
                     ch->payload.len, kmax, RECORD_OVERHEAD);
        else
            continue;
        ch->outcome = FAILED;
        bad++;
        fprintf(eo, "cmr-config: %s:%d: %s %s: %s\n", path, ch->line,
                ch->c.kind == CMR_CONFIG_MAPPINGS ? "mappings" : "environment",
                ch->c.kind == CMR_CONFIG_MAPPINGS ? "" : ch->c.environment->id, ch->why);
    }
    return bad;
}

/* One line per change: what happened to it. */
static void print_plan(const plan_t *plan, int dry_run, FILE *out)
{
    for (size_t i = 0; i < plan->n; i++) {
        const change_t *ch = &plan->items[i];
        const cmr_config_change_t *c = &ch->c;
        if (c->kind == CMR_CONFIG_MAPPINGS)
            fprintf(out, "%smappings: ", dry_run ? "~ " : "");
        else
            fprintf(out, "%senvironment %s: ", dry_run ? "~ " : "", c->environment->id);
        if (ch->outcome == FAILED)
            fprintf(out, "not %s: %s\n", ch->what, ch->why);
        else if (ch->outcome == UNKNOWN)
            fprintf(out, "%s or not: %s\n", ch->what, ch->why);
        else if (c->kind == CMR_CONFIG_MAPPINGS)
            fprintf(out, "%s (%zu entries, revision %" PRId64 ")\n", ch->what, c->mappings.count, c->revision);
        else if (c->kind == CMR_CONFIG_ENVIRONMENT_DELETED)
            fprintf(out, "%s (revision %" PRId64 ")\n", ch->what, c->revision);
        else
            fprintf(out, "%s (%zu sensor assignments, revision %" PRId64 ")\n", ch->what,
                    c->environment->assignments.count, c->revision);
    }
    if (plan->n == 0)
        fprintf(out, "no changes\n");
}

/* Marks every change still PLANNED. */
static void mark_all(plan_t *plan, outcome_t o, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void mark_all(plan_t *plan, outcome_t o, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < plan->n; i++)
        if (plan->items[i].outcome == PLANNED) {
            plan->items[i].outcome = o;
            if (o != PUBLISHED)
                snprintf(plan->items[i].why, sizeof plan->items[i].why, "%s", why);
        }
}

static void on_delivery(const cmr_delivery_t *d, void *opaque)
{
    (void)opaque;
    change_t *ch = d->opaque;
    if (ch)
        ch->delivered = d->err == 0 ? 1 : -1;
}

/* Queues every change (already encoded). 0, or -1 with err filled. */
static int send_all(cmr_producer_t *p, plan_t *plan, char *err, size_t errlen)
{
    const char *topic = cmr_topic_name(CMR_TOPIC_CONFIG);
    for (size_t i = 0; i < plan->n; i++) {
        change_t *ch = &plan->items[i];
        int rc = cmr_producer_send_raw(p, topic, ch->key, ch->key_len, ch->payload.data, ch->payload.len, ch);
        if (rc != CMR_SEND_OK) {
            snprintf(err, errlen, "%s",
                     rc == CMR_SEND_QUEUE_FULL ? "the local producer queue is full" : "produce failed");
            return -1;
        }
        ch->queued = 1;
    }
    return 0;
}

/* Without a transaction: every change is sent, and each says whether it was delivered. */
static void publish_plain(cmr_producer_t *p, plan_t *plan, int timeout_ms)
{
    char err[256] = "";
    send_all(p, plan, err, sizeof err);
    cmr_producer_flush(p, timeout_ms);
    for (size_t i = 0; i < plan->n; i++) {
        change_t *ch = &plan->items[i];
        if (ch->delivered == 1) {
            ch->outcome = PUBLISHED;
        } else if (ch->delivered == -1) {
            ch->outcome = FAILED;
            snprintf(ch->why, sizeof ch->why, "the cluster refused it (see the log line above)");
        } else if (!ch->queued) {
            ch->outcome = FAILED;
            snprintf(ch->why, sizeof ch->why, "not sent: %s", err[0] ? err : "an earlier change failed");
        }
    }
    mark_all(plan, UNKNOWN, "no delivery report within %d ms", timeout_ms);
}

/* In one transaction: all or nothing. */
static void publish_txn(cmr_producer_t *p, plan_t *plan, int timeout_ms)
{
    char err[512] = "";
    if (cmr_producer_txn_begin(p, timeout_ms, err, sizeof err) != 0) {
        mark_all(plan, FAILED,
                 "nothing was published: %s (config.transactional_id = \"\" publishes without a transaction)", err);
        return;
    }
    if (send_all(p, plan, err, sizeof err) != 0) {
        char aerr[256] = "";
        if (cmr_producer_txn_abort(p, timeout_ms, aerr, sizeof aerr) == 0)
            mark_all(plan, FAILED, "nothing was published (transaction aborted): %s", err);
        else
            mark_all(plan, UNKNOWN, "%s; %s (the cluster drops the open transaction after its timeout)", err, aerr);
        return;
    }
    int rc = cmr_producer_txn_commit(p, timeout_ms, err, sizeof err);
    if (rc == CMR_TXN_COMMITTED)
        mark_all(plan, PUBLISHED, "%s", "");
    else if (rc == CMR_TXN_ABORTED)
        mark_all(plan, FAILED, "nothing was published, the transaction was aborted: %s", err);
    else
        mark_all(plan, UNKNOWN, "the transaction's outcome is unknown (%s): see 'cmr-config diff'", err);
}

/* Publishes a validated plan: in one Kafka transaction (config.transactional_id, default
 * "cmr-config-apply") or, with an empty id, message by message with a delivery report for
 * each. Every change's outcome is set. 0 when all were published. */
static int publish(const cmr_conf_t *conf, plan_t *plan, FILE *eo)
{
    char err[512];
    int64_t timeout;
    if (cmr_conf_get_int(conf, "config.timeout_ms", 30000, 100, 3600000, &timeout, err, sizeof err) != 0)
        timeout = 30000;
    const char *txn_id = cmr_conf_get(conf, "config.transactional_id", "cmr-config-apply");
    cmr_conf_t *pconf = cmr_conf_dup(conf);
    if (!pconf || (*txn_id && cmr_conf_set(pconf, "kafka.transactional.id", txn_id, "config.transactional_id") != 0)) {
        cmr_conf_destroy(pconf);
        mark_all(plan, FAILED, "nothing was published: out of memory");
        return 1;
    }
    cmr_producer_t *p = cmr_producer_new(pconf, "cmr-config-cli", on_delivery, NULL, err, sizeof err);
    cmr_conf_destroy(pconf);
    if (!p) {
        mark_all(plan, FAILED, "nothing was published: %s", err);
        return 1;
    }
    if (*txn_id)
        publish_txn(p, plan, (int)timeout);
    else
        publish_plain(p, plan, (int)timeout);
    cmr_producer_destroy(p, 1000);
    size_t done = 0;
    for (size_t i = 0; i < plan->n; i++)
        done += plan->items[i].outcome == PUBLISHED;
    if (done != plan->n)
        fprintf(eo, "cmr-config: %zu of %zu changes published%s\n", done, plan->n,
                done ? ": run apply again to publish the rest" : "");
    return done == plan->n ? 0 : 1;
}

/* Plans (and unless dry_run publishes) a parsed document; path names it in messages.
 * 0 done, 1 refused (nothing sent), 2 the cluster failed (cmr.config unreadable, or not
 * every change published). */
static int apply_doc(const cmr_conf_t *conf, const cmr_cfg_doc_t *doc, const char *path, int dry_run, FILE *out,
                     FILE *eo)
{
    cmr_buf_t who = {0};
    cmr_cfg_state_t *s = load_state(conf, eo);
    plan_t plan = {0};
    int rc = 1;
    if (s && make_plan(s, doc, path, cmr_cfg_author(conf, &who), &plan, eo) == 0) {
        size_t bad = validate_plan(conf, &plan, path, eo);
        if (bad) {
            mark_all(&plan, FAILED, "nothing was published: %zu of %zu changes cannot be published", bad, plan.n);
            fprintf(eo, "cmr-config: nothing changed\n");
        } else {
            rc = dry_run || plan.n == 0 ? 0 : publish(conf, &plan, eo) ? 2 : 0;
        }
        print_plan(&plan, dry_run, out);
    } else if (s) {
        fprintf(eo, "cmr-config: nothing changed\n");
    } else {
        rc = 2;
    }
    plan_free(&plan);
    cmr_cfg_state_free(s);
    cmr_buf_free(&who);
    return rc;
}

int cmr_cfg_cli_apply(const cmr_conf_t *conf, const char *path, int dry_run, FILE *out)
{
    cmr_cfg_doc_t doc;
    char err[1024];
    if (cmr_cfg_doc_load(path, &doc, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: %s\ncmr-config: nothing changed\n", err);
        return 1;
    }
    int rc = apply_doc(conf, &doc, path, dry_run, out, stderr);
    cmr_cfg_doc_free(&doc);
    return rc ? 1 : 0;
}

int cmr_cfg_apply_text(const cmr_conf_t *conf, const char *text, size_t len, const char *origin, int dry_run, FILE *out,
                       FILE *err_out)
{
    cmr_cfg_doc_t doc;
    char err[1024];
    if (cmr_cfg_doc_parse(text, len, origin, &doc, err, sizeof err) != 0) {
        fprintf(err_out, "%s\nnothing changed\n", err);
        return 1;
    }
    int rc = apply_doc(conf, &doc, origin, dry_run, out, err_out);
    cmr_cfg_doc_free(&doc);
    return rc;
}

int cmr_cfg_cli_list(const cmr_conf_t *conf, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf, stderr);
    if (!s)
        return 1;
    fprintf(out, "%-24s %-9s %-8s %s\n", "ENVIRONMENT", "REVISION", "SENSORS", "NAME");
    int64_t rev;
    for (size_t i = 0; i < cmr_cfg_state_env_count(s); i++) {
        const cmr_environment_t *e = cmr_cfg_state_env_at(s, i, &rev);
        fprintf(out, "%-24s %-9" PRId64 " %-8zu %s\n", e->id, rev, e->assignments.count, e->name);
    }
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, &rev);
    fprintf(out, "\n# mappings, revision %" PRId64 " (first match wins)\n", rev);
    cmr_cfg_write_mappings(m, n, out);
    cmr_cfg_state_free(s);
    return 0;
}

int cmr_cfg_cli_show(const cmr_conf_t *conf, const char *id, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf, stderr);
    if (!s)
        return 1;
    int rc = 0;
    int64_t rev;
    if (strcmp(id, "mappings") == 0) {
        size_t n;
        const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, &rev);
        fprintf(out, "# revision %" PRId64 "\nversion: %d\n", rev, CMR_CFG_FORMAT_VERSION);
        cmr_cfg_write_mappings(m, n, out);
    } else {
        const cmr_environment_t *e = cmr_cfg_state_env(s, id, &rev);
        if (e) {
            fprintf(out, "# revision %" PRId64 "\nversion: %d\nenvironments:\n", rev, CMR_CFG_FORMAT_VERSION);
            cmr_cfg_write_env(e, out);
        } else {
            fprintf(stderr, "cmr-config: no environment \"%s\" (see 'cmr-config list')\n", id);
            rc = 1;
        }
    }
    cmr_cfg_state_free(s);
    return rc;
}

int cmr_cfg_cli_delete(const cmr_conf_t *conf, const char *id, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf, stderr);
    if (!s)
        return 1;
    int rc = 1;
    const cmr_environment_t *e = cmr_cfg_state_env(s, id, NULL);
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, NULL);
    for (size_t i = 0; e && i < n; i++)
        if (strcmp(m[i].environment_id, id) == 0) {
            fprintf(stderr,
                    "cmr-config: mapping %zu (agent \"%s\") still names environment \"%s\": change the "
                    "mappings first\n",
                    i + 1, m[i].agent_pattern, id);
            e = NULL;
            n = 0;
            rc = 2;
        }
    if (!e && rc == 1)
        fprintf(stderr, "cmr-config: no environment \"%s\"\n", id);
    if (e) {
        cmr_buf_t who = {0};
        cmr_environment_t gone = {.id = (char *)id, .name = (char *)id, .description = ""};
        change_t ch = {.what = "deleted",
                       .c = {.kind = CMR_CONFIG_ENVIRONMENT_DELETED,
                             .revision = cmr_cfg_state_key_revision(s, id) + 1,
                             .time_ms = cmr_wall_ms(),
                             .author = (char *)cmr_cfg_author(conf, &who),
                             .environment = &gone}};
        plan_t plan = {&ch, 1};
        rc = validate_plan(conf, &plan, "delete", stderr) ? 1 : publish(conf, &plan, stderr);
        print_plan(&plan, 0, out);
        cmr_buf_free(&ch.payload);
        cmr_buf_free(&who);
    }
    cmr_cfg_state_free(s);
    return rc ? 1 : 0;
}

/* --- keygen ------------------------------------------------------------------------- */

int cmr_cfg_cli_keygen(const cmr_conf_t *conf, FILE *out)
{
    const char *dir = cmr_conf_get(conf, "keygen.dir", NULL);
    const char *name = cmr_conf_get(conf, "keygen.name", "cmr");
    if (!dir || !dir[0]) {
        fprintf(stderr, "cmr-config: keygen needs --dir DIR (where NAME.key and NAME.pub are written)\n");
        return 2;
    }
    char err[512];
    if (cmr_trust_init() != 0) {
        fprintf(stderr, "cmr-config: keygen: libsodium cannot run here\n");
        return 1;
    }
    if (cmr_trust_keygen(dir, name, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: keygen: %s\n", err);
        return 1;
    }
    cmr_buf_t key = {0}, pub = {0};
    cmr_buf_printf(&key, "%s/%s.key", dir, name);
    cmr_buf_printf(&pub, "%s/%s.pub", dir, name);
    cmr_signer_t *s = cmr_buf_ok(&key) ? cmr_signer_load(cmr_buf_str(&key), err, sizeof err) : NULL;
    int rc = 1;
    if (s && cmr_buf_ok(&pub)) {
        fprintf(out,
                "secret key: %s (mode 0600: the workers' trust.signing_key)\n"
                "public key: %s (the agents' trust.keys)\n"
                "key id:     %s\n",
                cmr_buf_str(&key), cmr_buf_str(&pub), cmr_signer_key_id(s));
        rc = 0;
    } else {
        fprintf(stderr, "cmr-config: keygen: the new key does not load: %s\n", s ? "out of memory" : err);
    }
    cmr_signer_free(s);
    cmr_buf_free(&key);
    cmr_buf_free(&pub);
    return rc;
}
