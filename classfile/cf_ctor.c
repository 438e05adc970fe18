/*
 * cf_ctor.c - finds, in a constructor, the super()/this() call that initializes `this`.
 *
 * Until that invokespecial <init> runs, `this` is uninitializedThis and no exception handler
 * that could observe it may be added; the instrumenter therefore puts the entry probe right
 * after that call and starts its catch-all range there. The analysis is a small data-flow
 * over stack and local *words* with two tags (uninitializedThis / anything else): exactly
 * what is needed to recognize which invokespecial consumes uninitializedThis, without types.
 * Several init sites are allowed (Groovy selects the super constructor in a switch): the
 * entry probe goes after each of them, and the catch-all handler covers exactly the
 * instructions reached only after initialization (possibly several ranges). It refuses
 * (returns false with a reason) when no init site exists or when code after an init site is
 * also reached before initialization.
 */
#include "cf_ctor.h"

#include <stdlib.h>

enum { T_OTHER = 0, T_THIS = 1 };
#define SPECIAL 255

/* pops/pushes in words for opcodes with a fixed effect; SPECIAL = computed below */
static const uint8_t fx_pop[JVM_OPC_MAX + 1] = {
    0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       0,
    0,       0,       0,       0,       0,       SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 2,       2,       2,       2,       2,       2,
    2,       2,       SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, 3,       4,       3,       4,       3,       3,       3,       3,       SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 2,       4,       2,       4,       2,       4,       2,       4,
    2,       4,       2,       4,       2,       4,       2,       4,       2,       4,       2,       4,       1,
    2,       1,       2,       2,       3,       2,       3,       2,       3,       2,       4,       2,       4,
    2,       4,       0,       1,       1,       1,       2,       2,       2,       1,       1,       1,       2,
    2,       2,       1,       1,       1,       4,       2,       2,       4,       4,       1,       1,       1,
    1,       1,       1,       2,       2,       2,       2,       2,       2,       2,       2,       0,       SPECIAL,
    SPECIAL, 1,       1,       1,       2,       1,       2,       1,       0,       SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 0,       1,       1,       1,       1,       1,       1,       1,
    1,       SPECIAL, SPECIAL, 1,       1,       0,       SPECIAL,
};
static const uint8_t fx_push[JVM_OPC_MAX + 1] = {
    0,       1,       1,       1,       1,       1,       1,       1,       1,       2,       2,       1,       1,
    1,       2,       2,       1,       1,       SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 1,       2,       1,       2,       1,       1,
    1,       1,       SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, 0,       0,       0,       0,       0,       0,       0,       0,       SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 1,       2,       1,       2,       1,       2,       1,       2,
    1,       2,       1,       2,       1,       2,       1,       2,       1,       2,       1,       2,       1,
    2,       1,       2,       1,       2,       1,       2,       1,       2,       1,       2,       1,       2,
    1,       2,       0,       2,       1,       2,       1,       1,       2,       1,       2,       2,       1,
    2,       1,       1,       1,       1,       1,       1,       1,       1,       1,       0,       0,       0,
    0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       0,       SPECIAL,
    SPECIAL, 0,       0,       0,       0,       0,       0,       0,       0,       SPECIAL, SPECIAL, SPECIAL, SPECIAL,
    SPECIAL, SPECIAL, SPECIAL, SPECIAL, SPECIAL, 1,       1,       1,       1,       0,       1,       1,       0,
    0,       SPECIAL, SPECIAL, 0,       0,       0,       SPECIAL,
};

typedef struct sim {
    const cf_class *c;
    const cf_code *code;
    uint32_t ms, ml;
    uint8_t *stk, *loc; /* current state */
    uint32_t sp;
} sim;

static bool push(sim *s, uint8_t t)
{
    if (s->sp >= s->ms)
        return false;
    s->stk[s->sp++] = t;
    return true;
}
static bool pop(sim *s, uint32_t n)
{
    if (s->sp < n)
        return false;
    s->sp -= n;
    return true;
}

static int ref_words(const cf_class *c, uint16_t idx, int field, int *ret)
{
    cf_str o, n, d;
    if (idx == 0 || idx >= c->cp_count)
        return -1;
    if (c->cp[idx].tag == JVM_CONSTANT_InvokeDynamic) {
        if (!cf_cp_nat(c, c->cp[idx].b, &n, &d))
            return -1;
    } else if (!cf_cp_ref(c, idx, &o, &n, &d))
        return -1;
    if (field)
        return cf_field_words(d);
    return cf_desc_arg_words(d, ret);
}

static bool is_init_ref(const cf_class *c, uint16_t idx)
{
    cf_str o, n, d;
    return cf_cp_ref(c, idx, &o, &n, &d) && cf_str_eq(n, "<init>");
}

/* Executes one instruction on the word state. *init_site set when it initializes this. */
static bool step(sim *s, const cf_insn *in, bool *inits_this)
{
    const uint8_t *p = s->code->code + in->pc;
    uint8_t op = in->op;
    *inits_this = false;
    uint32_t idx = in->wide ? cmr_be16(p + 2) : (in->len >= 2 ? p[1] : 0);
    if (op >= JVM_OPC_iload && op <= JVM_OPC_aload_3) { /* loads: kind 0 i, 1 l, 2 f, 3 d, 4 a */
        uint32_t k = op <= JVM_OPC_aload ? idx : (uint32_t)(op - JVM_OPC_iload_0) % 4;
        uint32_t kind = op <= JVM_OPC_aload ? op - (uint32_t)JVM_OPC_iload : (uint32_t)(op - JVM_OPC_iload_0) / 4;
        uint32_t w = (kind == 1 || kind == 3) ? 2 : 1;
        if (k + w > s->ml)
            return false;
        if (kind == 4)
            return push(s, s->loc[k]);
        for (uint32_t i = 0; i < w; i++)
            if (!push(s, T_OTHER))
                return false;
        return true;
    }
    if (op >= JVM_OPC_istore && op <= JVM_OPC_astore_3) { /* stores */
        uint32_t k = op <= JVM_OPC_astore ? idx : (uint32_t)(op - JVM_OPC_istore_0) % 4;
        uint32_t kind = op <= JVM_OPC_astore ? op - (uint32_t)JVM_OPC_istore : (uint32_t)(op - JVM_OPC_istore_0) / 4;
        uint32_t w = (kind == 1 || kind == 3) ? 2 : 1;
        if (k + w > s->ml || s->sp < w)
            return false;
        uint8_t t = s->stk[s->sp - 1];
        s->sp -= w;
        for (uint32_t i = 0; i < w; i++)
            s->loc[k + i] = kind == 4 ? t : T_OTHER;
        return true;
    }
    uint8_t *st = s->stk;
    uint32_t sp = s->sp;
    switch (op) {
    case JVM_OPC_ldc:
    case JVM_OPC_ldc_w: return push(s, T_OTHER);
    case JVM_OPC_ldc2_w: return push(s, T_OTHER) && push(s, T_OTHER);
    case JVM_OPC_pop: return pop(s, 1);
    case JVM_OPC_pop2: return pop(s, 2);
    case JVM_OPC_dup: return sp >= 1 && push(s, st[sp - 1]);
    case JVM_OPC_dup_x1:
        if (sp < 2 || !push(s, 0))
            return false;
        st[sp] = st[sp - 1];
        st[sp - 1] = st[sp - 2];
        st[sp - 2] = st[sp];
        return true;
    case JVM_OPC_dup_x2:
        if (sp < 3 || !push(s, 0))
            return false;
        st[sp] = st[sp - 1];
        st[sp - 1] = st[sp - 2];
        st[sp - 2] = st[sp - 3];
        st[sp - 3] = st[sp];
        return true;
    case JVM_OPC_dup2:
        if (sp < 2 || !push(s, st[sp - 2]))
            return false;
        return push(s, st[sp - 1]);
    case JVM_OPC_dup2_x1: { /* c b a -> b a c b a */
        if (sp < 3 || s->sp + 2 > s->ms)
            return false;
        uint8_t a = st[sp - 1], b = st[sp - 2], c = st[sp - 3];
        st[sp - 3] = b;
        st[sp - 2] = a;
        st[sp - 1] = c;
        st[sp] = b;
        st[sp + 1] = a;
        s->sp += 2;
        return true;
    }
    case JVM_OPC_dup2_x2: { /* d c b a -> b a d c b a */
        if (sp < 4 || s->sp + 2 > s->ms)
            return false;
        uint8_t a = st[sp - 1], b = st[sp - 2], c = st[sp - 3], d = st[sp - 4];
        st[sp - 4] = b;
        st[sp - 3] = a;
        st[sp - 2] = d;
        st[sp - 1] = c;
        st[sp] = b;
        st[sp + 1] = a;
        s->sp += 2;
        return true;
    }
    case JVM_OPC_swap: {
        if (sp < 2)
            return false;
        uint8_t t = st[sp - 1];
        st[sp - 1] = st[sp - 2];
        st[sp - 2] = t;
        return true;
    }
    case JVM_OPC_getstatic:
    case JVM_OPC_putstatic:
    case JVM_OPC_getfield:
    case JVM_OPC_putfield: {
        int w = ref_words(s->c, cmr_be16(p + 1), 1, NULL);
        if (w < 0)
            return false;
        if (op == JVM_OPC_getstatic)
            return w == 1 ? push(s, 0) : push(s, 0) && push(s, 0);
        if (op == JVM_OPC_putstatic)
            return pop(s, (uint32_t)w);
        if (op == JVM_OPC_getfield)
            return pop(s, 1) && (w == 1 ? push(s, 0) : push(s, 0) && push(s, 0));
        return pop(s, (uint32_t)w + 1);
    }
    case JVM_OPC_invokevirtual:
    case JVM_OPC_invokespecial:
    case JVM_OPC_invokestatic:
    case JVM_OPC_invokeinterface:
    case JVM_OPC_invokedynamic: {
        uint16_t ref = cmr_be16(p + 1);
        int ret = 0;
        int w = ref_words(s->c, ref, 0, &ret);
        if (w < 0)
            return false;
        uint32_t recv = (op == JVM_OPC_invokestatic || op == JVM_OPC_invokedynamic) ? 0 : 1;
        if (sp < (uint32_t)w + recv)
            return false;
        if (op == JVM_OPC_invokespecial && is_init_ref(s->c, ref)) {
            uint8_t r = st[sp - (uint32_t)w - 1];
            if (r == T_THIS) {
                *inits_this = true;
                for (uint32_t i = 0; i < s->sp; i++)
                    st[i] = T_OTHER;
                for (uint32_t i = 0; i < s->ml; i++)
                    s->loc[i] = T_OTHER;
            }
        }
        if (!pop(s, (uint32_t)w + recv))
            return false;
        for (int i = 0; i < ret; i++)
            if (!push(s, T_OTHER))
                return false;
        return true;
    }
    case JVM_OPC_multianewarray: return pop(s, p[3]) && push(s, T_OTHER);
    case JVM_OPC_jsr:
    case JVM_OPC_jsr_w:
    case JVM_OPC_ret: /* refused before we get here */ return false;
    default: break;
    }
    if (op > JVM_OPC_MAX || fx_pop[op] == SPECIAL || fx_push[op] == SPECIAL)
        return false;
    if (!pop(s, fx_pop[op]))
        return false;
    for (uint32_t i = 0; i < fx_push[op]; i++)
        if (!push(s, T_OTHER))
            return false;
    return true;
}

/* Marks instructions reachable from `from` (by flow and exception edges) without passing
 * through instructions already marked in `stop`. */
static bool reach(const cf_code *code, const cf_insn *insns, uint32_t n, const uint32_t *pc2i, uint8_t *mark,
                  uint32_t *work, uint32_t nwork)
{
    while (nwork) {
        uint32_t i = work[--nwork];
        const cf_insn *in = &insns[i];
        uint32_t succ[3];
        uint32_t ns = 0;
#define PUSH_SUCC(j_)                \
    do {                             \
        uint32_t jj_ = (j_);         \
        if (jj_ < n && !mark[jj_]) { \
            mark[jj_] = 1;           \
            work[nwork++] = jj_;     \
        }                            \
    } while (0)
        for (uint16_t e = 0; e < code->exc_count; e++)
            if (in->pc >= code->exc[e].start && in->pc < code->exc[e].end)
                PUSH_SUCC(pc2i[code->exc[e].handler]);
        if (in->kind == CF_K_BRANCH16 || in->kind == CF_K_BRANCH32)
            succ[ns++] = pc2i[in->pc + in->branch];
        if (in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) {
            PUSH_SUCC(pc2i[in->pc + in->branch]);
            for (uint32_t k = 0; k < in->npairs; k++)
                PUSH_SUCC(pc2i[in->pc + cf_switch_target(code->code, in, k, NULL)]);
        }
        if (!cf_op_ends_flow(in->op))
            succ[ns++] = i + 1;
        for (uint32_t k = 0; k < ns; k++)
            PUSH_SUCC(succ[k]);
#undef PUSH_SUCC
    }
    return true;
}

bool cf_ctor_analyse(const cf_class *c, const cf_code *code, const cf_insn *insns, uint32_t n, const uint32_t *pc2i,
                     uint8_t *is_site, uint8_t *covered, char *why, size_t why_len)
{
    uint32_t ms = code->max_stack, ml = code->max_locals;
    size_t slot = (size_t)ms + ml + 4; /* sp (4 bytes) + stack + locals */
    if ((size_t)n * slot > ((size_t)64 << 20)) {
        snprintf(why, why_len, "constructor too large to analyse");
        return false;
    }
    uint8_t *states = malloc((size_t)n * slot + 1);
    uint8_t *seen = calloc(n, 1);
    uint32_t *work = malloc(sizeof(uint32_t) * (n + 1));
    uint8_t *cur = malloc(slot + 1);
    bool ok = states && seen && work && cur;
    uint32_t nwork = 0, nfound = 0;
    memset(is_site, 0, n);
    memset(covered, 0, n);
    if (!ok)
        snprintf(why, why_len, "out of memory");
    sim s = {c, code, ms, ml, cur + 4, cur + 4 + ms, 0};
    /* initial state */
    if (ok) {
        memset(cur, 0, slot);
        if (ml == 0) {
            ok = false;
            snprintf(why, why_len, "constructor with max_locals 0");
        } else {
            s.loc[0] = T_THIS;
            memcpy(states, cur, slot);
            seen[0] = 1;
            work[nwork++] = 0;
        }
    }
#define ENQUEUE(idx, st_ptr)                                    \
    do {                                                        \
        uint32_t j_ = (idx);                                    \
        if (!seen[j_]) {                                        \
            seen[j_] = 1;                                       \
            memcpy(states + (size_t)j_ * slot, (st_ptr), slot); \
            work[nwork++] = j_;                                 \
        }                                                       \
    } while (0)
    while (ok && nwork) {
        uint32_t i = work[--nwork];
        const cf_insn *in = &insns[i];
        memcpy(cur, states + (size_t)i * slot, slot);
        memcpy(&s.sp, cur, 4);
        /* exception handlers covering this instruction see the locals and [Throwable] */
        for (uint16_t e = 0; e < code->exc_count; e++) {
            const cf_exc *x = &code->exc[e];
            if (in->pc >= x->start && in->pc < x->end) {
                uint8_t *h = malloc(slot);
                if (!h) {
                    ok = false;
                    break;
                }
                memcpy(h, cur, slot);
                uint32_t one = 1;
                memcpy(h, &one, 4);
                h[4] = T_OTHER;
                ENQUEUE(pc2i[x->handler], h);
                free(h);
            }
        }
        bool init = false;
        if (!step(&s, in, &init)) {
            ok = false;
            snprintf(why, why_len, "constructor stack analysis failed at pc %u", in->pc);
            break;
        }
        memcpy(cur, &s.sp, 4);
        if (init) {
            if (!is_site[i])
                nfound++;
            is_site[i] = 1;
            continue; /* `this` is initialized from here on: not followed */
        }
        if (in->kind == CF_K_BRANCH16 || in->kind == CF_K_BRANCH32)
            ENQUEUE(pc2i[in->pc + in->branch], cur);
        if (in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) {
            ENQUEUE(pc2i[in->pc + in->branch], cur);
            for (uint32_t k = 0; k < in->npairs; k++)
                ENQUEUE(pc2i[in->pc + cf_switch_target(code->code, in, k, NULL)], cur);
        }
        if (!cf_op_ends_flow(in->op)) {
            if (i + 1 >= n) {
                ok = false;
                snprintf(why, why_len, "constructor falls off the end of the code");
                break;
            }
            ENQUEUE(i + 1, cur);
        }
    }
#undef ENQUEUE
    if (ok && nfound == 0) {
        ok = false;
        snprintf(why, why_len, "constructor never calls super()/this() on uninitializedThis");
    }
    if (ok) {
        /* post-init reachability from the instruction after every init site */
        uint8_t *post = calloc(n, 1);
        uint32_t nw = 0;
        if (!post)
            ok = false;
        for (uint32_t i = 0; ok && i < n; i++) {
            if (!is_site[i])
                continue;
            if (i + 1 >= n || seen[i + 1]) {
                ok = false;
                snprintf(why, why_len,
                         "code after the super()/this() call at pc %u is also reached "
                         "before it",
                         insns[i].pc);
            } else if (!post[i + 1]) {
                post[i + 1] = 1;
                work[nw++] = i + 1;
            }
        }
        if (ok)
            reach(code, insns, n, pc2i, post, work, nw);
        for (uint32_t i = 0; ok && i < n; i++)
            covered[i] = post[i] && !seen[i];
        free(post);
    }
    free(states);
    free(seen);
    free(work);
    free(cur);
    return ok;
}
