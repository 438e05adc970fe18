/*
 * cf_probe.c - the generic probe description: validation (cf_probe_check) and the
 * translation of one probe call into bytecode (push constant arguments, invokestatic,
 * pop a non-void result). Every probe kind (timer, anchor, conditional ...) goes through
 * this single path; only the description differs. Constants are added to the class's
 * pool through cf_cpool.c.
 */
#include "cf_probe.h"

#include <stdio.h>

/* Parses the parameter types of desc into codes: 'J','I','S' (String),'T' (Throwable/Object) */
static int param_codes(const char *d, char *codes, int max, char *ret)
{
    if (!d || d[0] != '(')
        return -1;
    int n = 0;
    const char *p = d + 1;
    while (*p && *p != ')') {
        if (n >= max)
            return -1;
        if (*p == 'J')
            codes[n++] = 'J', p++;
        else if (*p == 'I' || *p == 'Z' || *p == 'B' || *p == 'C' || *p == 'S')
            codes[n++] = 'I', p++;
        else if (!strncmp(p, "Ljava/lang/String;", 18))
            codes[n++] = 'S', p += 18;
        else if (!strncmp(p, "Ljava/lang/Throwable;", 21))
            codes[n++] = 'T', p += 21;
        else if (!strncmp(p, "Ljava/lang/Object;", 18))
            codes[n++] = 'T', p += 18;
        else
            return -1;
    }
    if (*p != ')')
        return -1;
    p++;
    if (!strcmp(p, "V"))
        *ret = 'V';
    else if (!strcmp(p, "J") || !strcmp(p, "D"))
        *ret = 'J';
    else if (strlen(p) == 1 && strchr("IZBCSF", *p))
        *ret = 'I';
    else if ((*p == 'L' && p[strlen(p) - 1] == ';') || *p == '[')
        *ret = 'A';
    else
        return -1;
    return n;
}

/* Strings go into the constant pool as they are: they must already be modified UTF-8,
 * which for C strings means no 4-byte (supplementary) sequences. */
static bool mutf8_ok(const char *s)
{
    for (; *s; s++)
        if ((uint8_t)*s >= 0xF0)
            return false;
    return true;
}

static cf_err check_call(const cf_probe_call *pc, const char *site, bool exc, cf_error *err)
{
    if (!pc->owner)
        return CF_OK;
    if (pc->name && pc->desc && (!mutf8_ok(pc->owner) || !mutf8_ok(pc->name) || !mutf8_ok(pc->desc)))
        return cf_fail(err, CF_ERR_ARG, "%s probe: owner/name/desc not representable in a class file", site);
    if (!pc->name || !pc->desc || !*pc->owner || !*pc->name)
        return cf_fail(err, CF_ERR_ARG, "%s probe: owner, name and desc are required", site);
    if (pc->nargs > CF_PROBE_MAX_ARGS)
        return cf_fail(err, CF_ERR_ARG, "%s probe: %u arguments (max %d)", site, pc->nargs, CF_PROBE_MAX_ARGS);
    char codes[CF_PROBE_MAX_ARGS + 1], ret;
    int n = param_codes(pc->desc, codes, CF_PROBE_MAX_ARGS + 1, &ret);
    if (n < 0 || n != pc->nargs)
        return cf_fail(err, CF_ERR_ARG, "%s probe: descriptor %s does not match %u arguments", site, pc->desc,
                       pc->nargs);
    int replaced = 0;
    for (int i = 0; i < n; i++)
        replaced += pc->args[i].kind == CF_PARG_ARG_REPLACED;
    if (replaced && (strcmp(site, "entry") != 0 || ret != 'A' || replaced > 1))
        return cf_fail(err, CF_ERR_ARG,
                       "%s probe: the result replaces one parameter, at the entry, from a probe that returns a "
                       "reference",
                       site);
    for (int i = 0; i < n; i++) {
        char want;
        switch (pc->args[i].kind) {
        case CF_PARG_METHOD_ID:
        case CF_PARG_LONG: want = 'J'; break;
        case CF_PARG_INT: want = 'I'; break;
        case CF_PARG_STRING:
        case CF_PARG_METHOD_NAME: want = 'S'; break;
        case CF_PARG_THROWABLE:
            if (!exc || i != 0)
                return cf_fail(err, CF_ERR_ARG,
                               "%s probe: THROWABLE only as first argument of the "
                               "exceptional-exit probe",
                               site);
            want = 'T';
            break;
        case CF_PARG_THIS:
            if (exc) /* the handler's frame has no locals */
                return cf_fail(err, CF_ERR_ARG, "%s probe: THIS is not available at the exceptional exit", site);
            want = 'T';
            break;
        case CF_PARG_THIS_INT_FIELD:
            if (exc)
                return cf_fail(err, CF_ERR_ARG, "%s probe: a field of THIS is not available at the exceptional exit",
                               site);
            if (!pc->args[i].s || !*pc->args[i].s || strlen(pc->args[i].s) > 255 || !mutf8_ok(pc->args[i].s) ||
                strpbrk(pc->args[i].s, ".;[/<>"))
                return cf_fail(err, CF_ERR_ARG, "%s probe: field name missing or not a field name", site);
            want = 'I';
            break;
        case CF_PARG_RETURN: /* an object, an int (or narrower) or a long: the method must match */
            if (strcmp(site, "normal-exit") != 0 || i != 0)
                return cf_fail(err, CF_ERR_ARG, "%s probe: RETURN only as first argument of the normal-exit probe",
                               site);
            want = codes[i] == 'I' || codes[i] == 'J' ? codes[i] : 'T';
            break;
        case CF_PARG_ARG:
        case CF_PARG_ARG_REPLACED:
            if (strcmp(site, "entry") != 0)
                return cf_fail(err, CF_ERR_ARG, "%s probe: ARG only at the entry site", site);
            if (pc->args[i].i < 0 || pc->args[i].i > 254)
                return cf_fail(err, CF_ERR_ARG, "%s probe: ARG index %lld out of range", site,
                               (long long)pc->args[i].i);
            want = 'T';
            break;
        default: return cf_fail(err, CF_ERR_ARG, "%s probe: unknown argument kind %d", site, pc->args[i].kind);
        }
        if (want != codes[i])
            return cf_fail(err, CF_ERR_ARG, "%s probe: argument %d does not match descriptor %s", site, i, pc->desc);
        if (pc->args[i].kind == CF_PARG_STRING &&
            (!pc->args[i].s || strlen(pc->args[i].s) > 65535 || !mutf8_ok(pc->args[i].s)))
            return cf_fail(err, CF_ERR_ARG,
                           "%s probe: string argument NULL, too long or with "
                           "supplementary characters (not modified UTF-8)",
                           site);
        if (pc->args[i].kind == CF_PARG_INT && (pc->args[i].i < INT32_MIN || pc->args[i].i > INT32_MAX))
            return cf_fail(err, CF_ERR_ARG, "%s probe: int argument %lld out of range", site, (long long)pc->args[i].i);
    }
    return CF_OK;
}

cf_err cf_probe_check(const cf_probe *p, cf_error *err)
{
    if (!p)
        return cf_fail(err, CF_ERR_ARG, "NULL probe");
    cf_err e = check_call(&p->enter, "entry", false, err);
    if (!e)
        e = check_call(&p->normal_exit, "normal-exit", false, err);
    if (!e)
        e = check_call(&p->exc_exit, "exceptional-exit", true, err);
    if (!e && !p->enter.owner && !p->normal_exit.owner && !p->exc_exit.owner)
        return cf_fail(err, CF_ERR_ARG, "probe has no call at any site");
    return e;
}

uint16_t cf_probe_methodref(cf_class *c, const cf_probe_call *pc)
{
    return cf_cp_add_methodref(c, pc->owner, pc->name, pc->desc);
}

int cf_probe_stack_words(const cf_probe_call *pc)
{
    if (!pc->owner)
        return 0;
    char codes[CF_PROBE_MAX_ARGS + 1], ret = 'V';
    int n = param_codes(pc->desc, codes, CF_PROBE_MAX_ARGS + 1, &ret);
    assert(n == pc->nargs); /* cf_probe_check accepted the description */
    (void)n;
    int w = 0;
    for (int i = 0; i < pc->nargs; i++) /* a long two words, anything else one */
        w += codes[i] == 'J' ? 2 : 1;
    int r = ret == 'V' ? 0 : ret == 'J' ? 2 : 1;
    return w > r ? w : r;
}

/* ldc or ldc_w of constant k (0: the pool is full; the caller refuses the method). */
static void push_ldc(cf_buf *b, uint16_t k)
{
    if (k <= UINT8_MAX) {
        cf_buf_u1(b, JVM_OPC_ldc);
        cf_buf_u1(b, (uint8_t)k);
    } else {
        cf_buf_u1(b, JVM_OPC_ldc_w);
        cf_buf_u2(b, k);
    }
}

static void push_int(cf_class *c, cf_buf *b, int64_t v, bool *full)
{
    if (v >= -1 && v <= 5)
        cf_buf_u1(b, (uint8_t)(JVM_OPC_iconst_0 + v));
    else if (v >= INT8_MIN && v <= INT8_MAX) {
        cf_buf_u1(b, JVM_OPC_bipush);
        cf_buf_u1(b, (uint8_t)(int8_t)v);
    } else if (v >= INT16_MIN && v <= INT16_MAX) {
        cf_buf_u1(b, JVM_OPC_sipush);
        cf_buf_u2(b, (uint16_t)(int16_t)v);
    } else {
        uint16_t k = cf_cp_add_int(c, (int32_t)v);
        if (!k)
            *full = true;
        push_ldc(b, k);
    }
}

/* Local slot and type of parameter `index` of m: *type is the first character of its
 * descriptor ('L', '[', 'I', 'J' ...), and *desc (when not NULL) that descriptor. -1 when
 * there is no such parameter. */
static int param_slot(const cf_class *c, const cf_member *m, int64_t index, char *type, cf_str *desc)
{
    cf_str d = cf_cp_utf8(c, m->desc);
    int slot = (m->access & JVM_ACC_STATIC) ? 0 : 1;
    uint32_t p = 1;
    for (int64_t k = 0; p < d.len && d.p[p] != ')'; k++) {
        char t = d.p[p];
        uint32_t q = p;
        while (q < d.len && d.p[q] == '[')
            q++;
        if (q < d.len && d.p[q] == 'L')
            while (q < d.len && d.p[q] != ';')
                q++;
        if (q >= d.len)
            return -1;
        if (k == index) {
            *type = t;
            if (desc)
                *desc = (cf_str){d.p + p, q - p + 1};
            return slot;
        }
        slot += (t == 'J' || t == 'D') ? 2 : 1;
        p = q + 1;
    }
    return -1;
}

/* Does instruction `in` store into local `slot` (or into slot - 1 with a two-word value)? */
static bool stores_into(const uint8_t *code, const cf_insn *in, int slot)
{
    uint8_t op = in->op;
    int idx = -1, words = 1;
    if (op >= JVM_OPC_istore && op <= JVM_OPC_astore) { /* index operand */
        idx = in->wide ? cmr_be16(code + in->pc + 2) : code[in->pc + 1];
        words = (op == JVM_OPC_lstore || op == JVM_OPC_dstore) ? 2 : 1;
    } else if (op >= JVM_OPC_istore_0 && op <= JVM_OPC_astore_3) { /* xstore_<n> */
        int group = (op - JVM_OPC_istore_0) / 4;                   /* 0 i, 1 l, 2 f, 3 d, 4 a */
        idx = (op - JVM_OPC_istore_0) % 4;
        words = (group == 1 || group == 3) ? 2 : 1;
    } else if (op == JVM_OPC_iinc) { /* the slot holds an int */
        idx = in->wide ? cmr_be16(code + in->pc + 2) : code[in->pc + 1];
    } else {
        return false;
    }
    return idx == slot || (words == 2 && idx + 1 == slot);
}

/* The method's return type (its descriptor's first character after ')'; 0 if none). */
static char return_type(const cf_class *c, const cf_member *m)
{
    cf_str d = cf_cp_utf8(c, m->desc);
    const char *close = memchr(d.p, ')', d.len);
    return close && close + 1 < (const char *)d.p + d.len ? close[1] : 0;
}

/* Whether the method returns what the normal-exit probe's RETURN argument takes: an object
 * for Object, an int, boolean, byte, char or short for int, a long for long. */
static bool return_fits(const cf_class *c, const cf_member *m, const cf_probe_call *pc, char *why, size_t whylen)
{
    char codes[CF_PROBE_MAX_ARGS + 1], ret;
    param_codes(pc->desc, codes, CF_PROBE_MAX_ARGS + 1, &ret);
    char t = return_type(c, m);
    bool fits = codes[0] == 'T' ? t == 'L' || t == '[' : codes[0] == 'I' ? t && strchr("IZBCS", t) != NULL : t == 'J';
    if (!fits)
        snprintf(why, whylen, "the probe wants the returned %s but the method returns %s",
                 codes[0] == 'T'   ? "object"
                 : codes[0] == 'I' ? "int"
                                   : "long",
                 t == 'V' ? "none" : "another type");
    return fits;
}

bool cf_probe_args_fit(const cf_class *c, const cf_member *m, const cf_probe *p, const cf_insn *in, uint32_t n,
                       const uint8_t *code, bool is_ctor, char *why, size_t whylen)
{
    const cf_probe_call *calls[2] = {&p->enter, &p->normal_exit};
    for (int s = 0; s < 2; s++) {
        const cf_probe_call *pc = calls[s];
        if (!pc->owner)
            continue;
        /* the entry probe reads locals before any code ran, except in constructors */
        bool after_code = s == 1 || is_ctor;
        for (int a = 0; a < pc->nargs; a++) {
            int slot;
            if (pc->args[a].kind == CF_PARG_RETURN) {
                if (!return_fits(c, m, pc, why, whylen))
                    return false;
                continue;
            }
            if (pc->args[a].kind == CF_PARG_THIS || pc->args[a].kind == CF_PARG_THIS_INT_FIELD) {
                if (m->access & JVM_ACC_STATIC) {
                    snprintf(why, whylen, "the probe wants `this` but the method is static");
                    return false;
                }
                slot = 0;
            } else if (pc->args[a].kind == CF_PARG_ARG || pc->args[a].kind == CF_PARG_ARG_REPLACED) {
                char type = 0;
                slot = param_slot(c, m, pc->args[a].i, &type, NULL);
                if (slot < 0 || (type != 'L' && type != '[')) {
                    snprintf(why, whylen, "the probe wants parameter %lld, which %s", (long long)pc->args[a].i,
                             slot < 0 ? "the method does not have" : "is not a reference");
                    return false;
                }
            } else {
                continue;
            }
            /* a replaced parameter must be the probe's copy for the whole method (and a slot
             * the method reuses for something else would get a wrong type) */
            if (!after_code && pc->args[a].kind != CF_PARG_ARG_REPLACED)
                continue;
            for (uint32_t i = 0; i < n; i++)
                if (stores_into(code, &in[i], slot)) {
                    snprintf(why, whylen, "local %d (read by the probe) is assigned at pc %u", slot, in[i].pc);
                    return false;
                }
        }
    }
    return true;
}

/* aload or astore (op) of a local, in its shortest form (op_0 is the op's xxx_0). */
static void local_op(cf_buf *b, uint8_t op, uint8_t op_0, int slot)
{
    if (slot <= 3) {
        cf_buf_u1(b, (uint8_t)(op_0 + slot));
    } else if (slot <= UINT8_MAX) {
        cf_buf_u1(b, op);
        cf_buf_u1(b, (uint8_t)slot);
    } else {
        cf_buf_u1(b, JVM_OPC_wide);
        cf_buf_u1(b, op);
        cf_buf_u2(b, (uint16_t)slot);
    }
}

static void push_aload(cf_buf *b, int slot)
{
    local_op(b, JVM_OPC_aload, JVM_OPC_aload_0, slot);
}

/* checkcast to parameter `index`'s type, astore into its local: the reference on the stack
 * replaces it. False when the pool has no room for the class. */
static bool store_result(cf_class *c, const cf_member *m, int64_t index, cf_buf *b)
{
    char type;
    cf_str d;
    int slot = param_slot(c, m, index, &type, &d);
    assert(slot >= 0); /* cf_probe_args_fit refused methods without that parameter */
    char name[1024];   /* a class: the name inside L...; an array: its descriptor */
    uint32_t from = type == 'L' ? 1 : 0, len = type == 'L' ? d.len - 2 : d.len;
    if (len >= sizeof name)
        return false;
    memcpy(name, d.p + from, len);
    name[len] = 0;
    uint16_t k = cf_cp_add_class(c, name);
    if (!k)
        return false;
    cf_buf_u1(b, JVM_OPC_checkcast);
    cf_buf_u2(b, k);
    local_op(b, JVM_OPC_astore, JVM_OPC_astore_0, slot);
    return true;
}

bool cf_probe_emit(cf_class *c, const cf_member *m, const cf_probe_call *pc, uint16_t mref, cf_probe_consts *pk,
                   cf_buf *b)
{
    if (!pc->owner)
        return true;
    bool full = false;
    for (int i = 0; i < pc->nargs; i++) {
        const cf_parg *a = &pc->args[i];
        switch (a->kind) {
        case CF_PARG_METHOD_ID:
        case CF_PARG_LONG: {
            int64_t v = a->kind == CF_PARG_METHOD_ID ? (int64_t)pk->method_id : a->i;
            if (a->kind == CF_PARG_LONG && (v == 0 || v == 1)) {
                cf_buf_u1(b, (uint8_t)(JVM_OPC_lconst_0 + v));
                break;
            }
            uint16_t k = 0;
            for (int j = 0; j < pk->nlongs; j++)
                if (pk->long_vals[j] == v)
                    k = pk->long_idx[j];
            if (!k) {
                k = cf_cp_add_long(c, v);
                if (!k)
                    full = true;
                else if (pk->nlongs < CF_PROBE_CONST_CACHE) {
                    pk->long_vals[pk->nlongs] = v;
                    pk->long_idx[pk->nlongs++] = k;
                }
            }
            cf_buf_u1(b, JVM_OPC_ldc2_w);
            cf_buf_u2(b, k);
            break;
        }
        case CF_PARG_INT: push_int(c, b, a->i, &full); break;
        case CF_PARG_STRING: {
            uint16_t k = cf_cp_add_string(c, a->s, strlen(a->s));
            if (!k)
                full = true;
            push_ldc(b, k);
            break;
        }
        case CF_PARG_METHOD_NAME: {
            if (!pk->name_str) {
                cf_str o = cf_class_name(c), n = cf_cp_utf8(c, m->name), d = cf_cp_utf8(c, m->desc);
                cf_buf s = {0};
                cf_buf_bytes(&s, o.p, o.len);
                cf_buf_u1(&s, '.');
                cf_buf_bytes(&s, n.p, n.len);
                cf_buf_bytes(&s, d.p, d.len);
                pk->name_str = s.oom ? 0 : cf_cp_add_string(c, (const char *)s.data, s.len);
                cf_buf_free(&s);
                if (!pk->name_str)
                    full = true;
            }
            push_ldc(b, pk->name_str);
            break;
        }
        case CF_PARG_THROWABLE: cf_buf_u1(b, JVM_OPC_dup); break; /* the exception on top: a copy */
        case CF_PARG_RETURN:                                      /* the value on top: a copy (a long: two words) */
            cf_buf_u1(b, return_type(c, m) == 'J' ? JVM_OPC_dup2 : JVM_OPC_dup);
            break;
        case CF_PARG_THIS: push_aload(b, 0); break;
        case CF_PARG_THIS_INT_FIELD: {
            uint16_t k = cf_cp_add_fieldref(c, c->this_class, a->s, "I");
            if (!k)
                full = true;
            push_aload(b, 0);
            cf_buf_u1(b, JVM_OPC_getfield);
            cf_buf_u2(b, k);
            break;
        }
        case CF_PARG_ARG:
        case CF_PARG_ARG_REPLACED: {
            char type;
            int slot = param_slot(c, m, a->i, &type, NULL);
            assert(slot >= 0); /* cf_probe_args_fit refused methods without that parameter */
            push_aload(b, slot);
            break;
        }
        }
    }
    cf_buf_u1(b, JVM_OPC_invokestatic);
    cf_buf_u2(b, mref);
    char codes[CF_PROBE_MAX_ARGS + 1], ret = 'V';
    param_codes(pc->desc, codes, CF_PROBE_MAX_ARGS + 1, &ret);
    int64_t replaced = -1;
    for (int i = 0; i < pc->nargs; i++)
        if (pc->args[i].kind == CF_PARG_ARG_REPLACED)
            replaced = pc->args[i].i;
    if (replaced >= 0) {
        if (!store_result(c, m, replaced, b))
            full = true;
    } else if (ret == 'J') {
        cf_buf_u1(b, JVM_OPC_pop2);
    } else if (ret != 'V') {
        cf_buf_u1(b, JVM_OPC_pop);
    }
    return !full && !b->oom;
}
