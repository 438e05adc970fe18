/*
 * instr_probe.c - sensor kinds to probe descriptions, and instrumentation of a class
 * according to a decision (see instr_probe.h).
 */
#include "cmr/instr_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/log.h"

#define CALL(n)                         \
    {                                   \
        CMR_PROBE_CLASS, n, "(J)V", 1,  \
        {                               \
            {                           \
                CF_PARG_METHOD_ID, 0, 0 \
            }                           \
        }                               \
    }

static const cf_probe probes[4] = {
    [CMR_SENSOR_TIMER] = {"timer", CALL("timerEnter"), CALL("timerExit"), CALL("timerExitThrow")},
    [CMR_SENSOR_INVOCATION_SEQUENCE] = {"invocation-sequence", CALL("enter"), CALL("exit"), CALL("exitThrow")},
    [CMR_SENSOR_ANCHOR] = {"anchor", CALL("anchorEnter"), CALL("anchorExit"), CALL("anchorExitThrow")},
    [CMR_SENSOR_CONDITIONAL] = {"conditional", CALL("condEnter"), CALL("condExit"), CALL("condExitThrow")},
};

/* A probe call with an object (or a returned value) and the method id: desc, and the
 * kind and index of its first argument. */
#define PAIR_CALL(n, desc, kind, i)     \
    {                                   \
        CMR_PROBE_CLASS, n, desc, 2,    \
        {                               \
            {kind, i, 0},               \
            {                           \
                CF_PARG_METHOD_ID, 0, 0 \
            }                           \
        }                               \
    }
/* The context probes of the hand-off points (docs/ARCHITECTURE.md, "The probe contract"):
 * one set per place the probe's object comes from (parameter 0, parameter 1, `this`). */
#define OBJ_CALL(n, kind, i) PAIR_CALL(n, "(Ljava/lang/Object;J)V", kind, i)
/* A normal exit that gets the returned object (an HTTP client's response). */
#define RET_CALL(n) PAIR_CALL(n, "(Ljava/lang/Object;J)V", CF_PARG_RETURN, 0)
/* An entry whose probe returns the object that replaces the parameter it was given. */
#define SWAP_CALL(n, i) PAIR_CALL(n, "(Ljava/lang/Object;J)Ljava/lang/Object;", CF_PARG_ARG_REPLACED, i)
/* A normal exit that gets the returned int ("I") or long ("J"): a JDBC update's count. */
#define NUM_CALL(n, t) PAIR_CALL(n, "(" t "J)V", CF_PARG_RETURN, 0)

/* Statement.execute*(String sql, ...): the statement (`this`, for its db.system) and its
 * SQL (parameter 0). The JDBC roles' entry when their object is parameter 0. */
#define SQL_TEXT_ENTRY                                                                  \
    {                                                                                   \
        CMR_PROBE_CLASS, "sqlEnterText", "(Ljava/lang/Object;Ljava/lang/Object;J)V", 3, \
        {                                                                               \
            {CF_PARG_THIS, 0, 0}, {CF_PARG_ARG, 0, 0},                                  \
            {                                                                           \
                CF_PARG_METHOD_ID, 0, 0                                                 \
            }                                                                           \
        }                                                                               \
    }

/* The roles' probes for an object from (kind, i); sql: the JDBC roles' entry from there. */
#define HANDOFF_SET(kind, i, sql)                                                                               \
    {                                                                                                           \
        [CMR_HANDOFF_CAPTURE] = {"ctx-capture", OBJ_CALL("ctxCapture", kind, i), {0}, {0}},                     \
        [CMR_HANDOFF_BEGIN] = {"ctx-begin", OBJ_CALL("ctxBegin", kind, i), {0}, {0}},                           \
        [CMR_HANDOFF_END] = {"ctx-end", CALL("ctxEnd"), {0}, {0}},                                              \
        [CMR_HANDOFF_SPAN] = {"ctx-span", OBJ_CALL("ctxBegin", kind, i), CALL("ctxEnd"), CALL("ctxEndThrow")},  \
        [CMR_HANDOFF_HTTP_OUT] = {"http-out", OBJ_CALL("httpOut", kind, i), {0}, {0}},                          \
        [CMR_HANDOFF_HTTP_IN] = {"http-in", OBJ_CALL("httpIn", kind, i), CALL("ctxEnd"), CALL("ctxEndThrow")},  \
        [CMR_HANDOFF_SQL] = {"sql", sql, CALL("sqlExit"), CALL("sqlExitThrow")},                                \
        [CMR_HANDOFF_SQL_PREPARE] = {"sql-prepare", OBJ_CALL("sqlPrepare", kind, i), CALL("sqlPrepared"),       \
                                     CALL("sqlPrepared")},                                                      \
        [CMR_HANDOFF_SQL_BIND] = {"sql-bind", OBJ_CALL("sqlBind", kind, i), {0}, {0}},                          \
        [CMR_HANDOFF_HTTP_CALL] = {"http-call", OBJ_CALL("httpCall", kind, i), RET_CALL("httpCallExit"),        \
                                   CALL("httpCallExitThrow")},                                                  \
        [CMR_HANDOFF_HTTP_CALL_VOID] = {"http-call", OBJ_CALL("httpCallVoid", kind, i), CALL("httpCallEnd"),    \
                                        CALL("httpCallExitThrow")},                                             \
        [CMR_HANDOFF_HTTP_OUT_IN_CALL] = {"http-out-in-call", OBJ_CALL("httpOutInCall", kind, i), {0}, {0}},    \
        [CMR_HANDOFF_QUIET] = {"quiet", CALL("quietBegin"), CALL("quietEnd"), CALL("quietEnd")},                \
        [CMR_HANDOFF_HTTP_SEND] = {"http-send", SWAP_CALL("httpSend", i), RET_CALL("httpSendExit"),             \
                                   CALL("httpSendExitThrow")},                                                  \
        [CMR_HANDOFF_HTTP_SEND_ASYNC] = {"http-send-async", SWAP_CALL("httpSendAsync", i),                      \
                                         RET_CALL("httpSendAsyncExit"), CALL("httpSendAsyncExitThrow")},        \
        [CMR_HANDOFF_SQL_UPDATE] = {"sql", sql, NUM_CALL("sqlExitRows", "I"), CALL("sqlExitThrow")},            \
        [CMR_HANDOFF_SQL_LARGE_UPDATE] = {"sql", sql, NUM_CALL("sqlExitLargeRows", "J"), CALL("sqlExitThrow")}, \
        [CMR_HANDOFF_SQL_BATCH] = {"sql", sql, RET_CALL("sqlExitBatch"), CALL("sqlExitThrow")},                 \
        [CMR_HANDOFF_HTTP_CALL_RESPONSE] = {"http-call-response", {0}, RET_CALL("httpCallResponse"), {0}},      \
        [CMR_HANDOFF_DETACH] = {"detach", CALL("ctxDetach"), {0}, {0}},                                         \
    }
static const cf_probe handoff_probes[3][CMR_HANDOFF__COUNT] = {
    HANDOFF_SET(CF_PARG_ARG, 0, SQL_TEXT_ENTRY),
    HANDOFF_SET(CF_PARG_ARG, 1, OBJ_CALL("sqlEnter", CF_PARG_ARG, 1)),
    HANDOFF_SET(CF_PARG_THIS, 0, OBJ_CALL("sqlEnter", CF_PARG_THIS, 0)),
};

/* A diagnosis' anchor whose conditions look at an argument (arg:N): the entry probe gets
 * parameter N as an object (reference-typed parameters only: the engine refuses others). */
#define ANCHOR_ARG(i)                                                                                     \
    {                                                                                                     \
        "anchor", OBJ_CALL("anchorEnterArg", CF_PARG_ARG, i), CALL("anchorExit"), CALL("anchorExitThrow") \
    }
static const cf_probe anchor_arg_probes[CMR_ANCHOR_MAX_ARG + 1] = {ANCHOR_ARG(0), ANCHOR_ARG(1), ANCHOR_ARG(2),
                                                                   ANCHOR_ARG(3)};

/* A servlet's service(request, response): both objects at entry. */
static const cf_probe servlet_in_probe = {"http-in",
                                          {CMR_PROBE_CLASS,
                                           "httpInServlet",
                                           "(Ljava/lang/Object;Ljava/lang/Object;J)V",
                                           3,
                                           {{CF_PARG_ARG, 0, 0}, {CF_PARG_ARG, 1, 0}, {CF_PARG_METHOD_ID, 0, 0}}},
                                          CALL("ctxEnd"),
                                          CALL("ctxEndThrow")};

/* HttpURLConnection.getInputStream: the connection and its responseCode field (-1 until a
 * response was read: the exchange is still to come) at entry, the connection at the normal
 * exit; the exceptional exit's probe remembers it from the entry. */
static const cf_probe url_call_probe = {
    "http-url-call",
    {CMR_PROBE_CLASS,
     "httpUrlCall",
     "(Ljava/lang/Object;IJ)V",
     3,
     {{CF_PARG_THIS, 0, 0}, {CF_PARG_THIS_INT_FIELD, 0, "responseCode"}, {CF_PARG_METHOD_ID, 0, 0}}},
    PAIR_CALL("httpUrlCallExit", "(Ljava/lang/Object;J)V", CF_PARG_THIS, 0),
    CALL("httpUrlCallExitThrow")};

const cf_probe *cmr_instr_pick_probe(const cmr_instr_pick_t *p)
{
    if (p->handoff == CMR_HANDOFF_HTTP_IN_SERVLET)
        return &servlet_in_probe;
    if (p->handoff == CMR_HANDOFF_HTTP_URL_CALL)
        return &url_call_probe;
    if (p->handoff == CMR_HANDOFF_NONE && p->sensor == CMR_SENSOR_ANCHOR && p->arg > 0 &&
        p->arg <= CMR_ANCHOR_MAX_ARG + 1)
        return &anchor_arg_probes[p->arg - 1];
    if (p->handoff > CMR_HANDOFF_NONE && p->handoff < CMR_HANDOFF__COUNT) {
        unsigned from = p->arg == CMR_HANDOFF_ARG_THIS ? 2 : p->arg;
        if (from < 3)
            return &handoff_probes[from][p->handoff];
    }
    return cmr_instr_probe(p->sensor);
}

const cf_probe *cmr_instr_probe(cmr_sensor_kind_t sensor)
{
    return (unsigned)sensor < sizeof probes / sizeof probes[0] ? &probes[sensor] : NULL;
}

void cmr_instr_built_free(cmr_instr_built_t *b)
{
    free(b->bytes);
    free(b->methods);
    free(b->meta_index);
    memset(b, 0, sizeof *b);
}

int cmr_instr_build(const uint8_t *bytes, size_t len, const cmr_instr_meta_t *meta, const cmr_instr_decision_t *d,
                    cmr_instr_built_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cf_class *c = NULL;
    cf_error e;
    if (cf_class_parse(bytes, len, &c, &e) != CF_OK) {
        snprintf(err, errlen, "class file does not parse: %s", e.msg);
        return -1;
    }
    out->methods = calloc(d->n_picks ? d->n_picks : 1, sizeof *out->methods);
    out->meta_index = calloc(d->n_picks ? d->n_picks : 1, sizeof *out->meta_index);
    if (!out->methods || !out->meta_index) {
        cf_class_free(c);
        cmr_instr_built_free(out);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < d->n_picks; i++) {
        const cmr_instr_method_t *m = &meta->methods[d->picks[i].method];
        cf_method_result res;
        cf_err rc = cf_instrument_method(c, m->index, cmr_instr_pick_probe(&d->picks[i]), &res, &e);
        if (rc != CF_OK) {
            out->n_refused++;
            cmr_log(CMR_LOG_DEBUG, "instr.method_refused", "class=%s method=%s%s reason=\"%s\"", meta->name, m->name,
                    m->desc, rc == CF_ERR_REFUSED ? res.why : e.msg);
            continue;
        }
        out->methods[out->n_methods] =
            (cmr_instrumented_method_t){(int64_t)res.method_id, m->name, m->desc, d->picks[i].sensor};
        out->meta_index[out->n_methods++] = d->picks[i].method;
    }
    int rc = 0;
    if (out->n_methods > 0 && cf_class_write(c, &out->bytes, &out->len, &e) != CF_OK) {
        snprintf(err, errlen, "class file does not write: %s", e.msg);
        cmr_instr_built_free(out);
        rc = -1;
    }
    cf_class_free(c);
    return rc;
}
