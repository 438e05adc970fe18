/*
 * instr_rules.h - which methods of a class get which sensor, from an environment's sensor
 * assignments (docs/ENVIRONMENTS.md) and the class's metadata (instr_meta.h).
 *
 * An assignment matches a method when all of its criteria hold:
 *   class        glob on the class's internal name
 *   superclass   a proper superclass, anywhere up the chain
 *   interface    an interface the class implements: directly, through a superclass, or
 *                through a super-interface (the whole hierarchy)
 *   annotation   carried by the class or by the method
 *   method       glob on the method name; constructors (<init>) only with constructors:
 *                true; static initializers, abstract and native methods never
 *   descriptor   glob on the method descriptor
 *   modifiers    required flags all set, excluded flags all clear
 *   trivial      accessors and tiny leaf methods (cmr_instr_method_t.trivial, from
 *                cf_method_trivial) match only an assignment with trivial: true
 * The first matching assignment of the environment gives the method its sensor. A trivial
 * method that some assignment would have matched but for `trivial` and that no assignment
 * picks is listed in the decision's `trivial` (the instrumenter's logs and metrics count
 * them).
 *
 * Superclasses and interfaces are resolved through a lookup function (the types the same
 * agent has sent). A type not seen yet cannot be followed: it is reported in `missing`
 * and the decision is made with what is known; the caller decides again when the type
 * arrives. Excluded classes (instr_exclude.h) get no sensor at all.
 */
#ifndef CMR_INSTR_RULES_H
#define CMR_INSTR_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/instr_meta.h"
#include "cmr/msg.h"

/* Returns the metadata of `type` as seen from the same agent, or NULL when that agent has
 * not sent it yet. The result is borrowed: it must stay valid until cmr_instr_decide()
 * returns. */
typedef const cmr_instr_meta_t *(cmr_instr_lookup_fn)(const char *type, void *ud);

/* The JDK's hand-off points get the context probes (docs/ARCHITECTURE.md, "The probe
 * contract") whenever the environment records invocation sequences. */
typedef enum cmr_instr_handoff {
    CMR_HANDOFF_NONE = 0,
    CMR_HANDOFF_CAPTURE,            /* entry: ctxCapture(task): the task is handed over here */
    CMR_HANDOFF_BEGIN,              /* entry: ctxBegin(task): the task starts running here */
    CMR_HANDOFF_END,                /* entry: ctxEnd: the task is done */
    CMR_HANDOFF_SPAN,               /* ctxBegin(task) at entry, ctxEnd / ctxEndThrow at the exits */
    CMR_HANDOFF_HTTP_OUT,           /* entry: httpOut(request): an outgoing request gets the headers */
    CMR_HANDOFF_HTTP_IN,            /* httpIn(request) at entry, ctxEnd / ctxEndThrow at the exits */
    CMR_HANDOFF_SQL,                /* sqlEnter(statement) at entry (sqlEnterText(statement, sql)
                                     * when the object is parameter 0, the SQL), sqlExit / sqlExitThrow at
                           * the exits: a JDBC call, a node with its SQL (db.statement) */
    CMR_HANDOFF_SQL_PREPARE,        /* sqlPrepare(sql) at entry, sqlPrepared at the exits:
                              * Connection.prepareStatement / prepareCall */
    CMR_HANDOFF_SQL_BIND,           /* entry: sqlBind(statement): a PreparedStatement made inside
                              * a prepare keeps its SQL */
    CMR_HANDOFF_HTTP_CALL,          /* httpCall(request) at entry, httpCallExit(the returned
                              * response) / httpCallExitThrow: an HTTP client's call, a node
                              * with method, URL and status, carrying the context */
    CMR_HANDOFF_HTTP_CALL_VOID,     /* the same for a call that returns no response: httpCallEnd */
    CMR_HANDOFF_HTTP_OUT_IN_CALL,   /* entry: httpOutInCall(builder): the request built inside
                                   * a client's call carries the context */
    CMR_HANDOFF_HTTP_IN_SERVLET,    /* httpInServlet(request, response) at entry (parameters 0
                                   * and 1), ctxEnd / ctxEndThrow: a servlet's service, its
                                   * response's status at the end */
    CMR_HANDOFF_QUIET,              /* quietBegin at entry, quietEnd at the exits: what the
                                   * method hands to another thread carries no context (a
                                   * virtual thread's scheduling) */
    CMR_HANDOFF_HTTP_SEND,          /* request = httpSend(request) at entry (the probe's copy with
                                   * the context headers replaces the parameter), httpSendExit
                                   * (the response) / httpSendExitThrow: the JDK HttpClient's
                                   * send, a node with method, URL and status */
    CMR_HANDOFF_HTTP_SEND_ASYNC,    /* request = httpSendAsync(request) at entry, httpSendAsyncExit
                                   * (the future) / httpSendAsyncExitThrow: its sendAsync, a node
                                   * from the send to the response, written when it completes */
    CMR_HANDOFF_SQL_UPDATE,         /* as CMR_HANDOFF_SQL, its exit sqlExitRows(the returned int):
                                   * executeUpdate, the node gets the row count */
    CMR_HANDOFF_SQL_LARGE_UPDATE,   /* the same for executeLargeUpdate's long: sqlExitLargeRows */
    CMR_HANDOFF_SQL_BATCH,          /* the same for executeBatch / executeLargeBatch's counts:
                                   * sqlExitBatch (their sum) */
    CMR_HANDOFF_HTTP_CALL_RESPONSE, /* exit only: httpCallResponse(the returned response): a
                                     * call node opened without one (HTTP_CALL_VOID: OkHttp's
                                     * AsyncCall.execute) gets its status from the method
                                     * inside it that returns the response */
    CMR_HANDOFF_HTTP_URL_CALL,      /* the JDK's HttpURLConnection.getInputStream, where its
                                     * exchange happens: httpUrlCall(this, this.responseCode)
                                     * at entry, httpUrlCallExit(this) / httpUrlCallExitThrow:
                                     * the exchange as a node (whatever arg says) */
    CMR_HANDOFF_DETACH,             /* entry: ctxDetach: a server's loop begins (an acceptor, a
                                     * selector, a reserved thread) in a pool job that carried a
                                     * context: its segment ends, the loop is no transaction */
    CMR_HANDOFF__COUNT
} cmr_instr_handoff_t;

/* cmr_instr_pick_t.arg: the probe's object is `this` rather than a parameter */
#define CMR_HANDOFF_ARG_THIS 0xFF

/* The highest parameter index a diagnosis' anchor can hand its probe (arg:N conditions). */
#define CMR_ANCHOR_MAX_ARG 3

typedef struct cmr_instr_pick {
    uint16_t method; /* index into meta->methods */
    cmr_sensor_kind_t sensor;
    cmr_instr_handoff_t handoff; /* a hand-off point's probe instead of the sensor's */
    uint8_t arg;                 /* a hand-off's object: parameter 0 or 1, or CMR_HANDOFF_ARG_THIS;
                                    an ANCHOR: 0, or 1 + the parameter its probe gets (arg:N) */
} cmr_instr_pick_t;

typedef struct cmr_instr_decision {
    cmr_instr_pick_t *picks; /* owned */
    size_t n_picks;
    cmr_instr_names_t missing; /* owned: types that could not be resolved */
    int excluded;              /* the class is on the exclusion list (hand-off points in it
                                 still get their context probes) */
    uint16_t *trivial;         /* owned: indices into meta->methods left out as trivial */
    size_t n_trivial;
} cmr_instr_decision_t;

/* Decides for one class. 0, or -1 on out of memory. */
int cmr_instr_decide(const cmr_environment_t *env, const cmr_instr_meta_t *cls, cmr_instr_lookup_fn *lookup, void *ud,
                     cmr_instr_decision_t *out);
void cmr_instr_decision_free(cmr_instr_decision_t *d);

/* Stable 64-bit summary of a decision (0 = nothing instrumented): the same picks give the
 * same value, so the cache can tell whether a class's instrumentation changed. */
uint64_t cmr_instr_decision_signature(const cmr_instr_meta_t *cls, const cmr_instr_decision_t *d);

#endif
