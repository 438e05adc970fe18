/*
 * cf_instrument.c - inserts probe calls into a method and relocates everything the insertion
 * moves.
 *
 * Shape of an instrumented method (no new locals, no frames except one):
 *     [entry probe]            at pc 0, or right after super()/this() in a constructor
 *     ... original code, each xRETURN preceded by [normal-exit probe] ...
 *   H:[exceptional-exit probe] athrow      catch-all over [after entry probe, H)
 * The entry probe is not a branch target (branches to the first instruction land after it);
 * a normal-exit probe is (branches to a return land on its probe). The handler gets the
 * only new StackMapTable frame: full_frame(locals=[], stack=[java/lang/Throwable]), which is
 * valid for any method because an empty locals list is assignable from every frame.
 *
 * Relocation: instructions are decoded (cf_code.c), a new layout is computed and iterated
 * until stable: 16-bit branches that no longer reach are widened (goto -> goto_w,
 * if<cond> L -> if<!cond> +8; goto_w L where the fall-through already has a frame, otherwise
 * if<cond> T with a `T: goto_w L` trampoline placed after an instruction that never falls
 * through, whose frame is L's frame written in full), switch padding follows the new pc. Then code, exception table, StackMapTable
 * (cf_stackmap.c), LineNumberTable, LocalVariable(Type)Table and type-annotation offsets are
 * rewritten. Anything that cannot be done safely is refused with a reason and the class is
 * left as it was (constant-pool additions are rolled back).
 * Ownership: the new Code attribute bytes are allocated in the class arena.
 */
#include "cf_ctor.h"
#include "cf_probe.h"
#include "cf_stackmap.h"

#include <stdio.h>
#include <stdlib.h>

#define NO_INDEX UINT32_MAX

const char *cf_refusal_name(cf_refusal r)
{
    switch (r) {
    case CF_REFUSE_NONE: return "none";
    case CF_REFUSE_ABSTRACT_OR_NATIVE: return "abstract-or-native";
    case CF_REFUSE_JSR_RET: return "jsr-ret";
    case CF_REFUSE_CODE_TOO_LARGE: return "code-too-large";
    case CF_REFUSE_STACK_TOO_LARGE: return "stack-too-large";
    case CF_REFUSE_BRANCH_NEEDS_FRAME: return "branch-needs-frame";
    case CF_REFUSE_CTOR_INIT: return "constructor-init";
    case CF_REFUSE_BAD_CODE: return "bad-code";
    case CF_REFUSE_CONSTANT_POOL_FULL: return "constant-pool-full";
    case CF_REFUSE_OBJECT_INIT: return "object-init";
    case CF_REFUSE_PROBE_ARGS: return "probe-args";
    case CF_REFUSE__COUNT: break;
    }
    return "unknown";
}

/* Buffers reused by every method of one instrumentation run (grown, never shrunk);
 * released by ctx_free. */
typedef struct scratch {
    cf_insn *insns;
    size_t insn_cap;
    uint8_t *starts;
    size_t starts_cap;
    uint32_t *u32;
    size_t u32_cap;
    uint16_t *u16;
    size_t u16_cap;
    uint8_t *u8;
    size_t u8_cap;
    uint32_t *special; /* indices of branches, switches and returns */
    size_t special_cap;
    cf_frame *frames;
    size_t frames_cap;
    cf_buf out, entry, exit, handler;
} scratch;

/* Class-level constants shared by all methods of one instrumentation run. */
typedef struct cls_ctx {
    bool ready;
    uint16_t mref[3];
    uint16_t throwable;
    uint16_t smt_name; /* "StackMapTable" Utf8, 0 = not looked up yet */
    int words[3];
    scratch s;
} cls_ctx;

static void ctx_free(cls_ctx *cx)
{
    free(cx->s.insns);
    free(cx->s.starts);
    free(cx->s.u32);
    free(cx->s.u16);
    free(cx->s.u8);
    free(cx->s.special);
    free(cx->s.frames);
    cf_buf_free(&cx->s.out);
    cf_buf_free(&cx->s.entry);
    cf_buf_free(&cx->s.exit);
    cf_buf_free(&cx->s.handler);
}

/* Makes room for `need` elements in a scratch array (at least 1024: most methods fit the
 * first allocation). */
#define GROW_SCRATCH(items, cap, need) (CF_GROW(items, cap, need, 1024) == 0)

typedef struct layout {
    const cf_code *code;
    cf_insn *in;
    uint32_t n;
    uint32_t *pc2i;        /* code_len + 1 entries; NO_INDEX inside instructions */
    uint32_t *start;       /* n + 1 entries: where instruction i's block begins */
    const uint8_t *starts; /* code_len flags: an instruction starts at pc */
    uint16_t *ent, *ex;
    uint16_t *tramp; /* bytes of trampolines placed before instruction i */
    uint8_t *widen, *has_frame;
    uint32_t end_orig; /* new pc after the last original instruction */
    /* trampolines: branch `br` jumps to a `goto_w` placed before instruction `at` (the
   * `ord`-th there), which jumps on to the branch's target */
    struct tramp {
        uint32_t br, at, ord;
    } * tr;
    uint32_t ntr;
    size_t tr_cap;
} layout;

typedef struct job {
    cf_class *c;
    cf_member *m;
    const cf_probe *p;
    cls_ctx *cx;
    cf_method_result *res;
    cf_code code;
    layout L;
    cf_frame *frames; /* scratch of the class context */
    uint32_t nframes;
    cf_xframe *xframes; /* expanded frames, only when trampolines need them */
    const cf_attr *smt;
    cf_buf *entry, *exit, *handler; /* scratch buffers of the class context */
    uint8_t *entry_at;              /* n flags: the entry probe precedes instruction i */
    uint8_t *covered;               /* n flags: instruction i is inside the catch-all */
    bool is_ctor;                   /* covered/entry_at come from the constructor analysis */
    uint32_t *special, nspecial;    /* branch / switch / return instruction indices */
    uint32_t nret;
} job;

static cf_err refuse(job *j, cf_refusal r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cf_err refuse(job *j, cf_refusal r, const char *fmt, ...)
{
    j->res->refusal = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->res->why, sizeof j->res->why, fmt, ap);
    va_end(ap);
    return CF_ERR_REFUSED;
}

/* ------------------------------------------------------------------ layout */

static bool is_cond(uint8_t op)
{
    return (op >= JVM_OPC_ifeq && op <= JVM_OPC_if_acmpne) || op == JVM_OPC_ifnull || op == JVM_OPC_ifnonnull;
}
/* The conditional branch with the opposite condition: ifeq <-> ifne, iflt <-> ifge ...
 * (from ifeq to if_acmpne the opcodes come in such pairs, the odd one first). */
static uint8_t invert(uint8_t op)
{
    if (op == JVM_OPC_ifnull)
        return JVM_OPC_ifnonnull;
    if (op == JVM_OPC_ifnonnull)
        return JVM_OPC_ifnull;
    return (op & 1) ? (uint8_t)(op + 1) : (uint8_t)(op - 1);
}

static uint32_t insn_size(const layout *L, uint32_t i, uint32_t pos)
{
    const cf_insn *in = &L->in[i];
    if (in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) {
        uint32_t pad = (4 - ((pos + 1) & 3)) & 3;
        uint32_t body = in->kind == CF_K_TABLESWITCH ? 12 + 4 * in->npairs : 8 + 8 * in->npairs;
        return 1 + pad + body;
    }
    if (in->kind == CF_K_BRANCH16 && L->widen[i])
        return is_cond(in->op) ? 8 : 5;
    return in->len;
}

/* block of instruction i: [entry probe][exit probe][instruction] */
/* block of instruction i: [trampolines][entry probe][exit probe][instruction] */
static inline uint32_t TGT(const layout *L, uint32_t i)
{
    return L->start[i] + L->tramp[i] + L->ent[i];
}
static inline uint32_t IPOS(const layout *L, uint32_t i)
{
    return TGT(L, i) + L->ex[i];
}

static void compute_positions(layout *L)
{
    uint32_t pos = 0;
    const cf_insn *in = L->in;
    for (uint32_t i = 0; i < L->n; i++) {
        L->start[i] = pos;
        pos += (uint32_t)L->tramp[i] + L->ent[i] + L->ex[i];
        uint8_t k = in[i].kind;
        pos +=
            (k == CF_K_BRANCH16 || k == CF_K_TABLESWITCH || k == CF_K_LOOKUPSWITCH) ? insn_size(L, i, pos) : in[i].len;
        if (pos > 0x7fffffffu)
            pos = 0x7fffffffu;
    }
    L->start[L->n] = pos;
    L->end_orig = pos;
}

static uint32_t target_index(const layout *L, uint32_t i, int32_t rel)
{
    return L->pc2i[(uint32_t)((int64_t)L->in[i].pc + rel)];
}

/* Widens branches until every offset fits. false + refusal when a widening needs a frame. */
static const struct tramp *tramp_of(const layout *L, uint32_t br)
{
    for (uint32_t k = 0; k < L->ntr; k++)
        if (L->tr[k].br == br)
            return &L->tr[k];
    return NULL;
}

static inline uint32_t tramp_pos(const layout *L, const struct tramp *t)
{
    return L->start[t->at] + 5 * t->ord;
}

/* A far conditional branch whose fall-through has no frame: jump (16-bit) to a `goto_w`
 * trampoline placed after an instruction that never falls through, before an instruction
 * that has a frame, outside every original exception range. The trampoline gets the
 * branch target's frame (written in full). Returns false if no place is in reach. */
static bool place_trampoline(job *j, uint32_t br)
{
    layout *L = &j->L;
    uint32_t from = IPOS(L, br), best = NO_INDEX;
    int64_t best_d = 0;
    for (uint32_t u = 0; u + 1 < L->n; u++) {
        if (!cf_op_ends_flow(L->in[u].op) || !L->has_frame[u + 1])
            continue;
        uint32_t pc_next = L->in[u + 1].pc;
        bool straddled = false;
        for (uint16_t e = 0; e < j->code.exc_count && !straddled; e++)
            straddled = j->code.exc[e].start < pc_next && j->code.exc[e].end > pc_next;
        if (straddled)
            continue;
        int64_t d = (int64_t)L->start[u + 1] + L->tramp[u + 1] - from;
        if (d < -30000 || d > 30000)
            continue; /* room for later shifts */
        if (best == NO_INDEX || (d < 0 ? -d : d) < (best_d < 0 ? -best_d : best_d)) {
            best = u + 1;
            best_d = d;
        }
    }
    if (best == NO_INDEX)
        return false;
    if (CF_GROW(L->tr, L->tr_cap, (size_t)L->ntr + 1, 8))
        return false;
    L->tr[L->ntr++] = (struct tramp){br, best, L->tramp[best] / 5u};
    L->tramp[best] = (uint16_t)(L->tramp[best] + 5);
    return true;
}

/* Widens branches until every offset fits. Refuses when a widening would need a frame that
 * cannot be provided. */
static cf_err stabilize(job *j)
{
    layout *L = &j->L;
    bool need_frames = j->c->major >= JVM_CLASSFILE_MAJOR_STACKMAP;
    for (;;) {
        compute_positions(L);
        if (L->end_orig > 65535)
            return CF_OK; /* caller refuses: too large */
        bool changed = false;
        for (uint32_t s = 0; s < j->nspecial; s++) {
            uint32_t i = j->special[s];
            const cf_insn *in = &L->in[i];
            if (in->kind != CF_K_BRANCH16 || L->widen[i])
                continue;
            const struct tramp *t = L->ntr ? tramp_of(L, i) : NULL;
            int64_t off = (t ? (int64_t)tramp_pos(L, t) : (int64_t)TGT(L, target_index(L, i, in->branch))) - IPOS(L, i);
            if (off >= -32768 && off <= 32767)
                continue;
            if (t)
                return refuse(j, CF_REFUSE_BRANCH_NEEDS_FRAME, "branch at pc %u lost the reach of its trampoline",
                              in->pc);
            if (is_cond(in->op) && need_frames && (i + 1 >= L->n || !L->has_frame[i + 1])) {
                if (j->is_ctor || !L->has_frame[target_index(L, i, in->branch)] || !place_trampoline(j, i))
                    return refuse(j, CF_REFUSE_BRANCH_NEEDS_FRAME,
                                  "conditional branch at pc %u must be widened, its fall-through has no "
                                  "stack map frame and no trampoline place is in reach",
                                  in->pc);
            } else {
                L->widen[i] = 1;
            }
            changed = true;
        }
        if (!changed)
            return CF_OK;
    }
}

/* ------------------------------------------------------------------ mapping helpers */

static bool map_tgt(const layout *L, uint32_t pc, uint32_t *out)
{
    if (pc >= L->code->code_len || !L->starts[pc])
        return false;
    *out = TGT(L, L->pc2i[pc]);
    return true;
}
static bool map_pre(const layout *L, uint32_t pc, uint32_t *out)
{
    if (pc == L->code->code_len) {
        *out = L->end_orig;
        return true;
    }
    if (pc > L->code->code_len || !L->starts[pc])
        return false;
    *out = L->start[L->pc2i[pc]];
    return true;
}
static bool map_ins_cb(void *ud, uint32_t pc, uint32_t *out)
{
    const layout *L = ud;
    if (pc >= L->code->code_len || !L->starts[pc])
        return false;
    *out = IPOS(L, L->pc2i[pc]);
    return true;
}

/* ------------------------------------------------------------------ code emission */

static void put_s4(cf_buf *b, int64_t v)
{
    cf_buf_u4(b, (uint32_t)(int32_t)v);
}

static void emit_code(job *j, cf_buf *b)
{
    layout *L = &j->L;
    const uint8_t *code = j->code.code;
    for (uint32_t i = 0; i < L->n; i++) {
        const cf_insn *in = &L->in[i];
        for (uint32_t ord = 0; ord * 5u < L->tramp[i]; ord++)
            for (uint32_t k = 0; k < L->ntr; k++)
                if (L->tr[k].at == i && L->tr[k].ord == ord) {
                    const cf_insn *bi = &L->in[L->tr[k].br];
                    cf_buf_u1(b, JVM_OPC_goto_w); /* trampoline to the branch's target */
                    put_s4(b, (int64_t)TGT(L, target_index(L, L->tr[k].br, bi->branch)) - tramp_pos(L, &L->tr[k]));
                }
        if (L->ent[i])
            cf_buf_bytes(b, j->entry->data, j->entry->len);
        if (L->ex[i])
            cf_buf_bytes(b, j->exit->data, j->exit->len);
        uint32_t at = IPOS(L, i);
        const struct tramp *tr = (in->kind == CF_K_BRANCH16 && L->ntr) ? tramp_of(L, i) : NULL;
        if (tr) {
            cf_buf_u1(b, in->op);
            cf_buf_u2(b, (uint16_t)(int16_t)((int64_t)tramp_pos(L, tr) - at));
        } else if (in->kind == CF_K_BRANCH16) {
            int64_t off = (int64_t)TGT(L, target_index(L, i, in->branch)) - at;
            if (!L->widen[i]) {
                cf_buf_u1(b, in->op);
                cf_buf_u2(b, (uint16_t)(int16_t)off);
            } else if (!is_cond(in->op)) {
                cf_buf_u1(b, in->op == JVM_OPC_goto ? JVM_OPC_goto_w : JVM_OPC_jsr_w);
                put_s4(b, off);
            } else {
                cf_buf_u1(b, invert(in->op));
                cf_buf_u2(b, 8);
                cf_buf_u1(b, JVM_OPC_goto_w);
                put_s4(b, off - 3);
            }
        } else if (in->kind == CF_K_BRANCH32) {
            cf_buf_u1(b, in->op);
            put_s4(b, (int64_t)TGT(L, target_index(L, i, in->branch)) - at);
        } else if (in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) {
            cf_buf_u1(b, in->op);
            for (uint32_t pad = (4 - ((at + 1) & 3)) & 3; pad; pad--)
                cf_buf_u1(b, 0);
            put_s4(b, (int64_t)TGT(L, target_index(L, i, in->branch)) - at);
            if (in->kind == CF_K_TABLESWITCH) {
                int32_t lo;
                cf_switch_target(code, in, 0, &lo);
                put_s4(b, lo);
                put_s4(b, (int64_t)lo + in->npairs - 1);
            } else {
                put_s4(b, in->npairs);
            }
            for (uint32_t k = 0; k < in->npairs; k++) {
                int32_t key;
                int32_t rel = cf_switch_target(code, in, k, &key);
                if (in->kind == CF_K_LOOKUPSWITCH)
                    put_s4(b, key);
                put_s4(b, (int64_t)TGT(L, target_index(L, i, rel)) - at);
            }
        } else {
            /* a run of instructions that need no rewriting and get no probe: one copy */
            uint32_t k = i + 1;
            while (k < L->n && !L->ent[k] && !L->ex[k] && !L->tramp[k] && L->in[k].kind != CF_K_BRANCH16 &&
                   L->in[k].kind != CF_K_BRANCH32 && L->in[k].kind != CF_K_TABLESWITCH &&
                   L->in[k].kind != CF_K_LOOKUPSWITCH)
                k++;
            uint32_t end = k < L->n ? L->in[k].pc : j->code.code_len;
            cf_buf_bytes(b, code + in->pc, end - in->pc);
            i = k - 1;
        }
    }
    cf_buf_bytes(b, j->handler->data, j->handler->len);
}

/* ------------------------------------------------------------------ tables */

/* Starts reading a table of n entries of `entry` bytes (u2 count first) and copies the
 * count to b; false when the attribute's length disagrees. */
static bool table_start(cf_rd *r, const cf_attr *a, size_t entry, cf_buf *b, uint16_t *n)
{
    cf_rd_init(r, a->data, a->len);
    *n = cf_rd_u2(r);
    if (r->bad || (size_t)*n * entry + 2 != a->len)
        return false;
    cf_buf_u2(b, *n);
    return true;
}

static bool rewrite_lnt(const layout *L, const cf_attr *a, cf_buf *b)
{
    cf_rd r;
    uint16_t n;
    if (!table_start(&r, a, 4, b, &n))
        return false;
    for (uint16_t i = 0; i < n; i++) {
        uint32_t pc = cf_rd_u2(&r), np;
        uint16_t line = cf_rd_u2(&r);
        if (!map_pre(L, pc, &np) || pc == L->code->code_len)
            return false;
        cf_buf_u2(b, (uint16_t)np);
        cf_buf_u2(b, line);
    }
    return true;
}

static bool map_range(const layout *L, uint32_t s, uint32_t len, uint32_t *ns, uint32_t *nlen)
{
    uint32_t e = s + len, ne;
    if (!map_pre(L, s, ns) || !map_pre(L, e, &ne) || ne < *ns)
        return false;
    *nlen = ne - *ns;
    return true;
}

static bool rewrite_lvt(const layout *L, const cf_attr *a, cf_buf *b)
{
    cf_rd r;
    uint16_t n;
    if (!table_start(&r, a, 10, b, &n))
        return false;
    for (uint16_t i = 0; i < n; i++) {
        uint32_t s = cf_rd_u2(&r), len = cf_rd_u2(&r), ns, nl;
        if (!map_range(L, s, len, &ns, &nl))
            return false;
        cf_buf_u2(b, (uint16_t)ns);
        cf_buf_u2(b, (uint16_t)nl);
        cf_buf_bytes(b, cf_rd_skip(&r, 6), 6);
    }
    return !r.bad;
}

static bool rewrite_type_annos(const layout *L, const cf_attr *a, cf_buf *b)
{
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    uint16_t n = cf_rd_u2(&r);
    cf_buf_u2(b, n);
    for (uint16_t i = 0; i < n && !r.bad; i++) {
        uint8_t t = cf_rd_u1(&r);
        cf_buf_u1(b, t);
        size_t from = r.pos;
        uint32_t np, nl;
        switch (t) {
        case CF_TARGET_LOCAL_VARIABLE:
        case CF_TARGET_RESOURCE_VARIABLE: {
            uint16_t k = cf_rd_u2(&r);
            cf_buf_u2(b, k);
            for (uint16_t x = 0; x < k && !r.bad; x++) {
                uint32_t s = cf_rd_u2(&r), len = cf_rd_u2(&r);
                uint16_t idx = cf_rd_u2(&r);
                if (r.bad || !map_range(L, s, len, &np, &nl))
                    return false;
                cf_buf_u2(b, (uint16_t)np);
                cf_buf_u2(b, (uint16_t)nl);
                cf_buf_u2(b, idx);
            }
            from = r.pos;
            break;
        }
        case CF_TARGET_EXCEPTION_PARAMETER:
            cf_rd_u2(&r); /* exception-table index: unchanged (ours is appended) */
            break;
        case CF_TARGET_INSTANCEOF:
        case CF_TARGET_NEW:
        case CF_TARGET_CONSTRUCTOR_REFERENCE:
        case CF_TARGET_METHOD_REFERENCE:
        case CF_TARGET_CAST:
        case CF_TARGET_CONSTRUCTOR_INVOCATION_TYPE_ARGUMENT:
        case CF_TARGET_METHOD_INVOCATION_TYPE_ARGUMENT:
        case CF_TARGET_CONSTRUCTOR_REFERENCE_TYPE_ARGUMENT:
        case CF_TARGET_METHOD_REFERENCE_TYPE_ARGUMENT: {
            uint32_t pc = cf_rd_u2(&r);
            if (r.bad || !map_ins_cb((void *)L, pc, &np))
                return false;
            cf_buf_u2(b, (uint16_t)np);
            if (t >= CF_TARGET_CAST) /* type_argument_index */
                cf_buf_u1(b, cf_rd_u1(&r));
            from = r.pos;
            break;
        }
        case CF_TARGET_CLASS_TYPE_PARAMETER:
        case CF_TARGET_METHOD_TYPE_PARAMETER:
        case CF_TARGET_METHOD_FORMAL_PARAMETER: cf_rd_u1(&r); break;
        case CF_TARGET_CLASS_EXTENDS:
        case CF_TARGET_THROWS: cf_rd_u2(&r); break;
        case CF_TARGET_CLASS_TYPE_PARAMETER_BOUND:
        case CF_TARGET_METHOD_TYPE_PARAMETER_BOUND: cf_rd_u2(&r); break;
        case CF_TARGET_FIELD:
        case CF_TARGET_METHOD_RETURN:
        case CF_TARGET_METHOD_RECEIVER: break;
        default: return false;
        }
        uint8_t plen = cf_rd_u1(&r);
        cf_rd_skip(&r, (size_t)plen * 2);
        if (r.bad || !cf_skip_annotation(&r, 0))
            return false;
        cf_buf_bytes(b, r.p + from, r.pos - from);
    }
    return !r.bad && r.pos == r.len && !b->oom;
}

/* The implicit initial frame of the method (JVMS 4.10.1.6), for expanding frames. Adds
 * Class constants for reference parameters when needed. */
static bool initial_frame(job *j, cf_vtype *v, uint16_t *n, uint16_t cap)
{
    cf_class *c = j->c;
    uint16_t k = 0;
    if (!(j->m->access & JVM_ACC_STATIC)) {
        if (k >= cap)
            return false;
        if (j->is_ctor)
            v[k++] = (cf_vtype){JVM_ITEM_UninitializedThis, 0};
        else
            v[k++] = (cf_vtype){JVM_ITEM_Object, c->this_class};
    }
    cf_str d = cf_cp_utf8(c, j->m->desc);
    uint32_t i = 1;
    char name[1024];
    while (i < d.len && d.p[i] != ')') {
        if (k >= cap)
            return false;
        uint32_t st = i;
        while (i < d.len && d.p[i] == '[')
            i++;
        if (i >= d.len)
            return false;
        char ch = d.p[i];
        if (ch == 'L') {
            while (i < d.len && d.p[i] != ';')
                i++;
            if (i >= d.len)
                return false;
        }
        i++;
        if (st != i - 1 || ch == 'L') {       /* array or class: Object_variable_info */
            uint32_t from = st, len = i - st; /* array: the descriptor itself */
            if (d.p[st] == 'L')
                from = st + 1, len = i - st - 2; /* class: the name inside L...; */
            if (len >= sizeof name)
                return false;
            memcpy(name, d.p + from, len);
            name[len] = 0;
            uint16_t ci = cf_cp_add_class(c, name);
            if (!ci)
                return false;
            v[k++] = (cf_vtype){JVM_ITEM_Object, ci};
        } else if (ch == 'J') {
            v[k++] = (cf_vtype){JVM_ITEM_Long, 0};
        } else if (ch == 'D') {
            v[k++] = (cf_vtype){JVM_ITEM_Double, 0};
        } else if (ch == 'F') {
            v[k++] = (cf_vtype){JVM_ITEM_Float, 0};
        } else {
            v[k++] = (cf_vtype){JVM_ITEM_Integer, 0};
        }
    }
    *n = k;
    return true;
}

static int32_t frame_index_at(const job *j, uint32_t pc)
{
    uint32_t lo = 0, hi = j->nframes;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (j->frames[mid].pc < pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < j->nframes && j->frames[lo].pc == pc ? (int32_t)lo : -1;
}

static bool rewrite_stackmap(job *j, cf_buf *b, uint32_t handler_pc)
{
    layout *L = &j->L;
    if (L->ntr && !j->xframes) {
        cf_vtype init[256];
        uint16_t ninit;
        if (!initial_frame(j, init, &ninit, 256) ||
            !cf_stackmap_expand(j->frames, j->nframes, init, ninit, &j->xframes))
            return false;
    }
    cf_buf_u2(b, (uint16_t)(j->nframes + L->ntr + 1));
    int64_t prev = -1;
    for (uint32_t i = 0; i < j->nframes; i++) {
        uint32_t np;
        if (!map_tgt(L, j->frames[i].pc, &np))
            return false;
        uint32_t x = L->pc2i[j->frames[i].pc];
        if (L->tramp[x]) {
            for (uint32_t ord = 0; ord * 5u < L->tramp[x]; ord++)
                for (uint32_t k = 0; k < L->ntr; k++) {
                    if (L->tr[k].at != x || L->tr[k].ord != ord)
                        continue;
                    const cf_insn *bi = &L->in[L->tr[k].br];
                    int32_t fi = frame_index_at(j, (uint32_t)((int64_t)bi->pc + bi->branch));
                    uint32_t tp = tramp_pos(L, &L->tr[k]);
                    if (fi < 0 || !cf_stackmap_put_full(b, &j->xframes[fi], prev, tp, map_ins_cb, L))
                        return false;
                    prev = tp;
                }
            /* the frame after the trampolines is written in full: its original encoding was
       * relative to the frame before it */
            if (!cf_stackmap_put_full(b, &j->xframes[i], prev, np, map_ins_cb, L))
                return false;
        } else if (!cf_stackmap_put_frame(b, &j->frames[i], prev, np, map_ins_cb, L)) {
            return false;
        }
        prev = np;
    }
    int64_t d = prev < 0 ? handler_pc : (int64_t)handler_pc - prev - 1;
    if (d < 0 || d > 65535)
        return false;
    cf_buf_u1(b, CF_FRAME_FULL);
    cf_buf_u2(b, (uint16_t)d);
    cf_buf_u2(b, 0); /* no locals */
    cf_buf_u2(b, 1); /* stack: [java/lang/Throwable] */
    cf_buf_u1(b, JVM_ITEM_Object);
    cf_buf_u2(b, j->cx->throwable);
    return !b->oom;
}

/* ------------------------------------------------------------------ steps */

/* Adds the probe methodrefs and java/lang/Throwable. One pass over the pool decides: when
 * the pool does not mention a probe's owner yet (the usual case), its entries are appended
 * without searching; otherwise they are looked up and reused. */
static cf_err prepare_class(cf_class *c, const cf_probe *p, cls_ctx *cx)
{
    if (cx->ready)
        return CF_OK;
    const cf_probe_call *calls[3] = {&p->enter, &p->normal_exit, &p->exc_exit};
    const char *names[5];
    size_t lens[5];
    uint16_t found[5];
    names[0] = "java/lang/Throwable", lens[0] = 19;
    names[1] = "StackMapTable", lens[1] = 13;
    for (int k = 0; k < 3; k++) {
        names[2 + k] = calls[k]->owner ? calls[k]->owner : "";
        lens[2 + k] = strlen(names[2 + k]);
    }
    cf_cp_find_utf8_multi(c, names, lens, found, 5);
    cx->smt_name = found[1];
    uint16_t owner_cls[3] = {0, 0, 0}, nm_idx[3] = {0, 0, 0}, ds_idx[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        cx->words[k] = cf_probe_stack_words(calls[k]);
        cx->mref[k] = 0;
        if (!calls[k]->owner)
            continue;
        if (found[2 + k]) { /* the pool already mentions this owner: look up and reuse */
            cx->mref[k] = cf_probe_methodref(c, calls[k]);
        } else { /* it cannot hold our entries yet: append without searching */
            uint16_t cls = 0, nm = 0, ds = 0;
            for (int q = 0; q < k; q++) {
                if (!owner_cls[q])
                    continue;
                if (!cls && !strcmp(calls[q]->owner, calls[k]->owner))
                    cls = owner_cls[q];
                if (!nm && !strcmp(calls[q]->name, calls[k]->name))
                    nm = nm_idx[q];
                if (!ds && !strcmp(calls[q]->desc, calls[k]->desc))
                    ds = ds_idx[q];
            }
            if (!cls) {
                uint16_t u = cf_cp_append_utf8(c, calls[k]->owner, lens[2 + k]);
                cls = u ? cf_cp_append_ref(c, JVM_CONSTANT_Class, u, 0) : 0;
            }
            if (!nm)
                nm = cf_cp_append_utf8(c, calls[k]->name, strlen(calls[k]->name));
            if (!ds)
                ds = cf_cp_append_utf8(c, calls[k]->desc, strlen(calls[k]->desc));
            owner_cls[k] = cls, nm_idx[k] = nm, ds_idx[k] = ds;
            uint16_t nat = nm && ds ? cf_cp_append_ref(c, JVM_CONSTANT_NameAndType, nm, ds) : 0;
            cx->mref[k] = cls && nat ? cf_cp_append_ref(c, JVM_CONSTANT_Methodref, cls, nat) : 0;
        }
        if (!cx->mref[k])
            return CF_ERR_LIMIT;
    }
    if (c->major >= JVM_CLASSFILE_MAJOR_STACKMAP) {
        uint16_t u = found[0] ? found[0] : cf_cp_append_utf8(c, "java/lang/Throwable", 19);
        cx->throwable = !u         ? 0
                        : found[0] ? cf_cp_add_ref1(c, JVM_CONSTANT_Class, u)
                                   : cf_cp_append_ref(c, JVM_CONSTANT_Class, u, 0);
        if (!cx->throwable)
            return CF_ERR_LIMIT;
    }
    cx->ready = true;
    return CF_OK;
}

static cf_err alloc_layout(job *j, cf_error *err)
{
    layout *L = &j->L;
    scratch *S = &j->cx->s;
    size_t n = L->n, cl = j->code.code_len;
    if (!GROW_SCRATCH(S->u16, S->u16_cap, 3 * n) || !GROW_SCRATCH(S->u8, S->u8_cap, 5 * n))
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    L->code = &j->code;
    L->pc2i = S->u32;
    L->start = S->u32 + cl + 1;
    L->starts = S->starts;
    L->ent = S->u16;
    L->ex = S->u16 + n;
    L->tramp = S->u16 + 2 * n;
    memset(S->u16, 0, 3 * n * sizeof(uint16_t));
    L->ntr = 0;
    L->widen = S->u8;
    L->has_frame = S->u8 + n;
    j->entry_at = S->u8 + 2 * n;
    j->covered = S->u8 + 3 * n;
    memset(S->u8, 0, 5 * n);
    /* pc2i (filled by the decoder) is only read where starts[pc] says an instruction begins */
    return CF_OK;
}

static void free_job(job *j)
{
    free(j->L.tr);
    free(j->xframes);
    cf_code_release(&j->code);
}

static bool is_name(const cf_class *c, uint16_t idx, const char *s)
{
    return cf_str_eq(cf_cp_utf8(c, idx), s);
}

/* Code sub-attributes the relocation rewrites (dispatch on the name's length first). */
enum { CA_OTHER, CA_SMT, CA_LNT, CA_LVT, CA_TYPE_ANNOS };
static int code_attr_kind(const cf_class *c, uint16_t idx)
{
    cf_str n = cf_cp_utf8(c, idx);
    switch (n.len) {
    case 13: return memcmp(n.p, "StackMapTable", 13) ? CA_OTHER : CA_SMT;
    case 15: return memcmp(n.p, "LineNumberTable", 15) ? CA_OTHER : CA_LNT;
    case 18: return memcmp(n.p, "LocalVariableTable", 18) ? CA_OTHER : CA_LVT;
    case 22: return memcmp(n.p, "LocalVariableTypeTable", 22) ? CA_OTHER : CA_LVT;
    case 29: return memcmp(n.p, "RuntimeVisibleTypeAnnotations", 29) ? CA_OTHER : CA_TYPE_ANNOS;
    case 31: return memcmp(n.p, "RuntimeInvisibleTypeAnnotations", 31) ? CA_OTHER : CA_TYPE_ANNOS;
    default: return CA_OTHER;
    }
}

/* Decodes code and frames, applies the refusal rules, finds the entry point. */
static cf_err analyse(job *j, cf_error *err)
{
    cf_class *c = j->c;
    cf_error e2;
    const cf_attr *ca = cf_method_code_attr(c, j->m);
    if ((j->m->access & (JVM_ACC_ABSTRACT | JVM_ACC_NATIVE)) || !ca)
        return refuse(j, CF_REFUSE_ABSTRACT_OR_NATIVE, "method has no code");
    if (is_name(c, j->m->name, "<init>") && cf_str_eq(cf_class_name(c), "java/lang/Object"))
        return refuse(j, CF_REFUSE_OBJECT_INIT,
                      "java/lang/Object.<init> is special-cased by the JVM: with exception handlers "
                      "it crashes HotSpot's JIT (seen on 17.0.15 and 25.0.3)");
    if (cf_code_parse(c, ca, &j->code, &e2))
        return refuse(j, CF_REFUSE_BAD_CODE, "%s", e2.msg);
    scratch *S = &j->cx->s;
    size_t cl = j->code.code_len;
    /* u32 scratch: pc2i (cl + 1) then start (n + 1 <= cl + 1) */
    if (!GROW_SCRATCH(S->u32, S->u32_cap, 2 * cl + 2) || !GROW_SCRATCH(S->special, S->special_cap, cl))
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    uint32_t nsp = 0;
    if (cf_code_decode_ex(&j->code, &S->insns, &S->insn_cap, &S->starts, &S->starts_cap, S->u32, S->special, &nsp,
                          &j->L.n, &e2))
        return refuse(j, CF_REFUSE_BAD_CODE, "%s", e2.msg);
    j->L.in = S->insns;
    j->special = S->special;
    j->nspecial = j->nret = 0;
    /* jsr/ret: fine for the type-inference verifier (class files < 50: subroutine code is
   * relocated like any other, jsr widened to jsr_w); from 50 on a StackMapTable cannot
   * describe subroutines, so such methods are refused. */
    bool subroutines_ok = c->major < JVM_CLASSFILE_MAJOR_STACKMAP;
    for (uint32_t q = 0; q < nsp; q++) { /* non-plain instructions only; compacted in place */
        uint32_t i = S->special[q];
        const cf_insn *in = &j->L.in[i];
        if (in->kind == CF_K_PLAIN || in->kind == CF_K_INVOKE) {
            if (in->op == JVM_OPC_ret && !subroutines_ok)
                return refuse(j, CF_REFUSE_JSR_RET, "jsr/ret subroutine at pc %u (class file %u)", in->pc, c->major);
            continue;
        }
        if ((in->op == JVM_OPC_jsr || in->op == JVM_OPC_jsr_w) && !subroutines_ok)
            return refuse(j, CF_REFUSE_JSR_RET, "jsr/ret subroutine at pc %u (class file %u)", in->pc, c->major);
        j->special[j->nspecial++] = i;
        j->nret += in->kind == CF_K_RETURN;
    }
    cf_err e = alloc_layout(j, err);
    if (e)
        return e;
    if (c->major >= JVM_CLASSFILE_MAJOR_STACKMAP) {
        for (uint16_t k = 0; k < j->code.attr_count; k++)
            if (code_attr_kind(c, j->code.attrs[k].name) == CA_SMT) {
                if (j->smt)
                    return refuse(j, CF_REFUSE_BAD_CODE, "two StackMapTable attributes");
                j->smt = &j->code.attrs[k];
            }
        if (j->smt) {
            if (cf_stackmap_decode_into(j->smt, j->code.code_len, &S->frames, &S->frames_cap, &j->nframes, &e2))
                return refuse(j, CF_REFUSE_BAD_CODE, "%s", e2.msg);
            j->frames = S->frames;
            for (uint32_t f = 0; f < j->nframes; f++) {
                if (!j->L.starts[j->frames[f].pc]) /* decode checked pc < code_len */
                    return refuse(j, CF_REFUSE_BAD_CODE, "stack map frame at pc %u inside an instruction",
                                  j->frames[f].pc);
                j->L.has_frame[j->L.pc2i[j->frames[f].pc]] = 1;
            }
        }
    }
    uint32_t n = j->L.n;
    uint8_t *is_site = j->entry_at + 2 * (size_t)n;
    if (is_name(c, j->m->name, "<init>") && !(j->m->access & JVM_ACC_STATIC) &&
        !cf_str_eq(cf_class_name(c), "java/lang/Object")) {
        char why[CF_ERROR_MSG_MAX];
        if (!cf_ctor_analyse(c, &j->code, j->L.in, n, j->L.pc2i, is_site, j->covered, why, sizeof why))
            return refuse(j, CF_REFUSE_CTOR_INIT, "%s", why);
        for (uint32_t i = 0; i + 1 < n; i++)
            if (is_site[i])
                j->entry_at[i + 1] = 1;
        j->is_ctor = true;
    } else {
        j->entry_at[0] = 1; /* covered[] is implied: everything (see write_code_attr) */
    }
    char why[CF_ERROR_MSG_MAX];
    if (!cf_probe_args_fit(c, j->m, j->p, j->L.in, n, j->code.code, j->is_ctor, why, sizeof why))
        return refuse(j, CF_REFUSE_PROBE_ARGS, "%s", why);
    return CF_OK;
}

static cf_err build_snippets(job *j)
{
    cf_probe_consts pk = {0};
    pk.method_id = j->res->method_id;
    const cf_probe *p = j->p;
    j->entry = &j->cx->s.entry;
    j->exit = &j->cx->s.exit;
    j->handler = &j->cx->s.handler;
    j->entry->len = j->exit->len = j->handler->len = 0;
    bool ok = cf_probe_emit(j->c, j->m, &p->enter, j->cx->mref[0], &pk, j->entry) &&
              cf_probe_emit(j->c, j->m, &p->normal_exit, j->cx->mref[1], &pk, j->exit) &&
              cf_probe_emit(j->c, j->m, &p->exc_exit, j->cx->mref[2], &pk, j->handler);
    cf_buf_u1(j->handler, JVM_OPC_athrow);
    if (!ok || j->handler->oom)
        return refuse(j, CF_REFUSE_CONSTANT_POOL_FULL, "constant pool full while adding probe constants");
    return CF_OK;
}

static void plan_insertions(job *j)
{
    layout *L = &j->L;
    if (!j->is_ctor)
        L->ent[0] = (uint16_t)j->entry->len;
    else
        for (uint32_t i = 0; i < L->n; i++)
            if (j->entry_at[i])
                L->ent[i] = (uint16_t)j->entry->len;
    if (j->exit->len)
        for (uint32_t k = 0; k < j->nspecial; k++)
            if (L->in[j->special[k]].kind == CF_K_RETURN)
                L->ex[j->special[k]] = (uint16_t)j->exit->len;
}

static cf_err write_code_attr(job *j, cf_buf *o)
{
    layout *L = &j->L;
    cf_class *c = j->c;
    uint32_t handler_pc = L->end_orig;
    uint32_t new_len = handler_pc + (uint32_t)j->handler->len;
    if (new_len > 65535)
        return refuse(j, CF_REFUSE_CODE_TOO_LARGE, "code would be %u bytes (max 65535)", new_len);
    int w = j->cx->words[0] > j->cx->words[1] ? j->cx->words[0] : j->cx->words[1];
    uint32_t ms = (uint32_t)j->code.max_stack + (uint32_t)w;
    if ((uint32_t)j->cx->words[2] + 1 > ms)
        ms = (uint32_t)j->cx->words[2] + 1;
    if (ms > 65535)
        return refuse(j, CF_REFUSE_STACK_TOO_LARGE, "max_stack would be %u", ms);
    cf_buf_u2(o, (uint16_t)ms);
    cf_buf_u2(o, j->code.max_locals);
    cf_buf_u4(o, new_len);
    size_t code_at = o->len;
    emit_code(j, o);
    assert(o->oom || o->len - code_at == new_len); /* emit_code follows the layout */
    if (!o->oom && o->len - code_at != new_len)
        return refuse(j, CF_REFUSE_BAD_CODE, "internal layout mismatch (%zu != %u)", o->len - code_at, new_len);
    /* exception table: originals, then the catch-all ranges (last, so they never shadow them) */
    uint32_t nranges = 0;
    if (!j->is_ctor)
        nranges = 1; /* everything after the entry probe */
    else
        for (uint32_t i = 0; i < L->n; i++)
            if (j->covered[i] && (i == 0 || !j->covered[i - 1]))
                nranges++;
    if (nranges == 0 || j->code.exc_count + nranges > 65535)
        return refuse(j, CF_REFUSE_BAD_CODE, "no code to cover with the exceptional-exit handler");
    cf_buf_u2(o, (uint16_t)(j->code.exc_count + nranges));
    for (uint16_t k = 0; k < j->code.exc_count; k++) {
        const cf_exc *x = &j->code.exc[k];
        uint32_t s, e, h;
        if (!map_tgt(L, x->start, &s) || !map_pre(L, x->end, &e) || !map_tgt(L, x->handler, &h) || e <= s)
            return refuse(j, CF_REFUSE_BAD_CODE, "exception entry %u cannot be relocated", k);
        cf_buf_u2(o, (uint16_t)s);
        cf_buf_u2(o, (uint16_t)e);
        cf_buf_u2(o, (uint16_t)h);
        cf_buf_u2(o, x->type);
    }
    for (uint32_t i = 0; i < L->n; i++) {
        if (!j->is_ctor) { /* one range: [after the entry probe, handler) */
            cf_buf_u2(o, (uint16_t)TGT(L, 0));
            cf_buf_u2(o, (uint16_t)handler_pc);
            cf_buf_u2(o, (uint16_t)handler_pc);
            cf_buf_u2(o, 0);
            break;
        }
        if (!j->covered[i] || (i > 0 && j->covered[i - 1]))
            continue;
        uint32_t k = i;
        while (k < L->n && j->covered[k])
            k++;
        uint32_t s = TGT(L, i), e = k < L->n ? L->start[k] : handler_pc;
        assert(e > s); /* every instruction has a size */
        if (e <= s)
            continue;
        cf_buf_u2(o, (uint16_t)s);
        cf_buf_u2(o, (uint16_t)e);
        cf_buf_u2(o, (uint16_t)handler_pc);
        cf_buf_u2(o, 0);
    }
    /* sub-attributes */
    bool add_smt = c->major >= JVM_CLASSFILE_MAJOR_STACKMAP && !j->smt;
    uint16_t smt_name = 0;
    if (add_smt) {
        if (!j->cx->smt_name || j->cx->smt_name >= c->cp_count)
            j->cx->smt_name = cf_cp_add_utf8(c, "StackMapTable", 13);
        smt_name = j->cx->smt_name;
        if (!smt_name)
            return refuse(j, CF_REFUSE_CONSTANT_POOL_FULL, "no room for StackMapTable name");
    }
    cf_buf_u2(o, (uint16_t)(j->code.attr_count + (add_smt ? 1 : 0)));
    for (uint16_t k = 0; k < j->code.attr_count; k++) {
        const cf_attr *a = &j->code.attrs[k];
        cf_buf_u2(o, a->name);
        size_t len_at = o->len;
        cf_buf_u4(o, 0);
        size_t body = o->len;
        bool ok = true;
        const char *what = NULL;
        int kind = CA_OTHER;
        if (a == j->smt)
            ok = rewrite_stackmap(j, o, handler_pc), what = "StackMapTable";
        else if ((kind = code_attr_kind(c, a->name)) == CA_LNT)
            ok = rewrite_lnt(L, a, o), what = "LineNumberTable";
        else if (kind == CA_LVT)
            ok = rewrite_lvt(L, a, o), what = "LocalVariable(Type)Table";
        else if (kind == CA_TYPE_ANNOS)
            ok = rewrite_type_annos(L, a, o), what = "type annotations";
        else
            cf_buf_bytes(o, a->data, a->len);
        if (!ok)
            return refuse(j, CF_REFUSE_BAD_CODE, "%s cannot be relocated", what);
        if (!o->oom)
            cmr_put_be32(o->data + len_at, (uint32_t)(o->len - body));
    }
    if (add_smt) {
        cf_buf_u2(o, smt_name);
        size_t len_at = o->len;
        cf_buf_u4(o, 0);
        size_t body = o->len;
        if (!rewrite_stackmap(j, o, handler_pc))
            return refuse(j, CF_REFUSE_BAD_CODE, "cannot write StackMapTable");
        if (!o->oom)
            cmr_put_be32(o->data + len_at, (uint32_t)(o->len - body));
    }
    return o->oom ? CF_ERR_NOMEM : CF_OK;
}

static cf_err instrument_one(cf_class *c, uint16_t mi, const cf_probe *p, cls_ctx *cx, cf_method_result *res,
                             cf_error *err)
{
    cf_member *m = &c->methods[mi];
    res->refusal = CF_REFUSE_NONE;
    res->why[0] = 0;
    res->method_index = mi;
    res->name = cf_cp_utf8(c, m->name);
    res->desc = cf_cp_utf8(c, m->desc);
    res->method_id = cf_method_id(c, m);
    job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.m = m;
    j.p = p;
    j.cx = cx;
    j.res = res;
    uint16_t cp_mark = c->cp_count;
    bool was_ready = cx->ready;
    cf_buf *o = &cx->s.out;
    o->len = 0;
    cf_err e = analyse(&j, err);
    if (!e) {
        if (prepare_class(c, p, cx))
            e = refuse(&j, CF_REFUSE_CONSTANT_POOL_FULL, "constant pool full");
    }
    if (!e)
        e = build_snippets(&j);
    if (!e) {
        plan_insertions(&j);
        e = stabilize(&j);
    }
    if (!e) {
        cf_buf_reserve(o, (size_t)cf_method_code_attr(c, m)->len + j.entry->len + (size_t)j.nret * j.exit->len +
                              j.handler->len + 4u * j.nspecial + 64);
        e = write_code_attr(&j, o);
    }
    if (!e) {
        uint8_t *data = cf_arena_alloc(c->arena, o->len);
        if (!data)
            e = cf_fail(err, CF_ERR_NOMEM, "out of memory");
        else {
            memcpy(data, o->data, o->len);
            cf_attr *ca = (cf_attr *)cf_method_code_attr(c, m);
            ca->data = data;
            ca->len = (uint32_t)o->len;
        }
    }
    if (e) {
        c->cp_count = cp_mark; /* roll back constant-pool additions */
        if (!was_ready)
            cx->ready = false; /* its constants were rolled back too */
        if (e == CF_ERR_REFUSED)
            cf_fail(err, CF_ERR_REFUSED, "%s: %s", cf_refusal_name(res->refusal), res->why);
    }
    free_job(&j);
    return e;
}

cf_err cf_instrument_method(cf_class *c, uint16_t method_index, const cf_probe *p, cf_method_result *res, cf_error *err)
{
    cf_err e = cf_probe_check(p, err);
    if (e)
        return e;
    if (method_index >= c->method_count)
        return cf_fail(err, CF_ERR_ARG, "method index %u out of range", method_index);
    cls_ctx cx = {0};
    e = instrument_one(c, method_index, p, &cx, res, err);
    ctx_free(&cx);
    return e;
}

cf_err cf_instrument_class(const uint8_t *bytes, size_t len, const cf_probe *p, cf_method_filter filter, void *ud,
                           cf_instrument_result *out, cf_error *err)
{
    memset(out, 0, sizeof *out);
    cf_err e = cf_probe_check(p, err);
    if (e)
        return e;
    cf_class *c;
    e = cf_class_parse(bytes, len, &c, err);
    if (e)
        return e;
    out->methods = c->method_count ? calloc(c->method_count, sizeof(cf_method_result)) : NULL;
    if (c->method_count && !out->methods) {
        cf_class_free(c);
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    }
    cls_ctx cx = {0};
    for (uint16_t i = 0; i < c->method_count; i++) {
        if (filter && !filter(c, &c->methods[i], ud))
            continue;
        cf_method_result *r = &out->methods[out->n_methods++];
        cf_error e2;
        e = instrument_one(c, i, p, &cx, r, &e2);
        if (e == CF_OK)
            out->n_instrumented++;
        else if (e != CF_ERR_REFUSED) {
            cf_fail(err, e, "method %u: %s", i, e2.msg);
            break;
        }
        e = CF_OK;
    }
    ctx_free(&cx);
    if (!e && out->n_instrumented)
        e = cf_class_write(c, &out->bytes, &out->len, err);
    /* results' name/desc point into the caller's `bytes` (parsed Utf8 entries are borrowed) */
    cf_class_free(c);
    if (e) {
        cf_instrument_result_free(out);
        return e;
    }
    return CF_OK;
}

void cf_instrument_result_free(cf_instrument_result *r)
{
    free(r->bytes);
    free(r->methods);
    memset(r, 0, sizeof *r);
}

cf_err cf_instrument_stacked(const uint8_t *bytes, size_t len, const cf_probe *const *probes, unsigned n,
                             cf_pass_fn each, void *ud, cf_instrument_result *out, cf_error *err)
{
    memset(out, 0, sizeof *out);
    if (err)
        err->code = CF_OK;
    uint8_t *cur = NULL; /* output of the last pass that changed the class; owned here */
    size_t cur_len = len;
    for (unsigned k = 0; k < n; k++) {
        cf_instrument_result r;
        cf_err e = cf_instrument_class(cur ? cur : bytes, cur_len, probes[k], NULL, NULL, &r, err);
        if (e) {
            free(cur);
            cf_instrument_result_free(out);
            return e;
        }
        if (each)
            each(k, &r, ud);
        if (r.bytes) {
            free(cur);
            cur = r.bytes;
            cur_len = r.len;
            r.bytes = NULL;
        }
        if (k == 0) { /* the first pass's report, names into `bytes` */
            out->n_methods = r.n_methods;
            out->n_instrumented = r.n_instrumented;
            out->methods = r.methods;
            r.methods = NULL;
        }
        cf_instrument_result_free(&r);
    }
    out->bytes = cur;
    out->len = cur ? cur_len : 0;
    return CF_OK;
}
