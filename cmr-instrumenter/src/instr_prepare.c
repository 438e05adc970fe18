/*
 * instr_prepare.c - the pure part of answering one class (see instr_prepare.h).
 *
 * In order: build the bytes for the decision; when a diagnosis' probes do not fit the
 * class, build the environment's decision instead (the class keeps the environment's
 * probes); then the digest of the original bytes (what the agent checks before it
 * applies a Redefine), whether the agent already runs these bytes (its cache of grants),
 * and the class grant or the diagnosis' scope.
 */
#include "cmr/instr_prepare.h"

#include <stdio.h>
#include <string.h>

#include "cmr/grant.h"

/* A diagnosis' scope for bytes that carry its probes: its limits, and the bytes of the
 * environment's decision alone to restore (built into out->restore; the original bytes
 * when that decision instruments nothing). */
static void diag_scope(const cmr_instr_prep_in_t *in, cmr_instr_prep_t *out)
{
    char err[256];
    const cmr_diagnosis_t *diag = out->diag;
    cmr_instr_built_t *r = &out->restore;
    bool original = in->env_d->n_picks == 0 ||
                    cmr_instr_build(in->bytes, in->len, in->meta, in->env_d, r, err, sizeof err) != 0 ||
                    r->n_methods == 0;
    out->scope = (cmr_diagnosis_scope_t){
        .id = (int64_t)cmr_diag_id_number(diag->id),
        .revision = diag->revision,
        .end_ms = diag->ttl_ms > 0 ? diag->started_ms + diag->ttl_ms : 0,
        .max_hits = diag->max_hits,
        .overhead_budget_pct = diag->overhead_budget_pct,
        .conditions = {diag->conditions.items, diag->conditions.count},
        .restore_bytecode = original ? (cmr_bytes_t){(uint8_t *)in->bytes, in->len} : (cmr_bytes_t){r->bytes, r->len},
        .restore_original = original,
    };
}

/* Whether the agent runs exactly the built bytes already, from its cache of class grants
 * (ClassLoaded.applied_digest): then no Redefine is needed. */
static bool agent_runs(const cmr_bytes_t *applied, const cmr_instr_built_t *b)
{
    if (!applied || applied->len != CMR_TRUST_DIGEST_BYTES)
        return false;
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(b->bytes, b->len, d);
    return memcmp(d, applied->data, sizeof d) == 0;
}

/* The class grant (cmr/grant.h): what lets the next JVM of the environment run the
 * bytes from its cache at load time. None when grants are off or the ids do not fit one
 * (the Redefine goes without; grant_error says why). */
static void make_grant(const cmr_instr_prep_in_t *in, cmr_instr_prep_t *out)
{
    if (in->grant_lifetime_ms <= 0 || !in->signer || !in->env_id || !*in->env_id)
        return;
    if (cmr_grant_sign(in->signer, in->env_id, in->revision, in->class_name, out->original_digest, out->built.bytes,
                       out->built.len, in->grant_lifetime_ms, &out->grant, out->grant_error,
                       sizeof out->grant_error) != 0)
        cmr_buf_free(&out->grant);
}

void cmr_instr_prepare(const cmr_instr_prep_in_t *in, uint64_t sig, cmr_instr_prep_t *out)
{
    memset(out, 0, sizeof *out);
    out->sig = sig;
    out->diag = out->asked = in->diag;
    const cmr_instr_decision_t *d = in->d;
    bool built = cmr_instr_build(in->bytes, in->len, in->meta, d, &out->built, out->err, sizeof out->err) == 0;
    if (out->diag && (!built || out->built.n_methods == 0)) {
        /* the diagnosis' probes do not fit this class: it keeps the environment's bytes */
        snprintf(out->diag_error, sizeof out->diag_error, "%s", built ? "every method refused" : out->err);
        if (built)
            cmr_instr_built_free(&out->built);
        out->diag_failed = true;
        out->diag = NULL;
        out->sig = in->sig_env;
        out->err[0] = '\0';
        if (!out->sig)
            return; /* CMR_PREP_NONE */
        d = in->env_d;
        built = cmr_instr_build(in->bytes, in->len, in->meta, d, &out->built, out->err, sizeof out->err) == 0;
    }
    if (!built) {
        out->status = CMR_PREP_FAILED;
        out->sig = 0;
        return;
    }
    if (out->built.n_methods == 0) {
        out->status = CMR_PREP_REFUSED;
        out->sig = 0;
        return;
    }
    out->status = CMR_PREP_READY;
    if (!out->diag && agent_runs(in->applied, &out->built)) {
        out->agent_runs = true;
        return;
    }
    cmr_trust_digest(in->bytes, in->len, out->original_digest); /* binds the new bytes to these */
    if (out->diag)
        diag_scope(in, out);
    else
        make_grant(in, out);
}

void cmr_instr_prep_free(cmr_instr_prep_t *p)
{
    cmr_instr_built_free(&p->built);
    cmr_instr_built_free(&p->restore);
    cmr_buf_free(&p->grant);
}
