/*
 * cf_code.c - the Code attribute and its instructions.
 *
 * cf_code_parse splits a Code attribute into code bytes, exception table and sub-attributes
 * (the sub-attribute data stays borrowed from the class). cf_insn_decode decodes one
 * instruction with full bounds checking (including tableswitch/lookupswitch padding, which
 * depends on the instruction's pc); cf_code_decode_all decodes a whole method and checks that
 * every branch and switch target lands on an instruction start. The relocation in
 * cf_instrument.c relies on that guarantee. Descriptor word counting lives here too.
 */
#include "cf_internal.h"

#include <stdlib.h>

/* Instruction lengths: 0 = invalid opcode, 255 = variable length. */
static const uint8_t op_len[256] = {
    /* 0x00 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x10 */ 2, 3, 2, 3, 3,   2, 2, 2, 2, 2, 1,   1,   1, 1, 1, 1,
    /* 0x20 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x30 */ 1, 1, 1, 1, 1,   1, 2, 2, 2, 2, 2,   1,   1, 1, 1, 1,
    /* 0x40 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x50 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x60 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x70 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x80 */ 1, 1, 1, 1, 3,   1, 1, 1, 1, 1, 1,   1,   1, 1, 1, 1,
    /* 0x90 */ 1, 1, 1, 1, 1,   1, 1, 1, 1, 3, 3,   3,   3, 3, 3, 3,
    /* 0xa0 */ 3, 3, 3, 3, 3,   3, 3, 3, 3, 2, 255, 255, 1, 1, 1, 1,
    /* 0xb0 */ 1, 1, 3, 3, 3,   3, 3, 3, 3, 5, 5,   3,   2, 3, 1, 1,
    /* 0xc0 */ 3, 3, 1, 1, 255, 4, 3, 3, 5, 5, 0,   0,   0, 0, 0, 0,
};

const cf_attr *cf_method_code_attr(const cf_class *c, const cf_member *m)
{
    return cf_attr_find(c, m->attrs, m->attr_count, "Code");
}

cf_err cf_code_parse(const cf_class *c, const cf_attr *a, cf_code *out, cf_error *err)
{
    out->exc = NULL;
    out->attrs = NULL;
    out->exc_count = out->attr_count = 0;
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    /* The JVMS once allowed a u1/u1/u2 header before 45.3; HotSpot 17 and 25 read every
   * version with this layout (checked: a 45.0 class with the old header is rejected), so the
   * engine does the same. */
    out->max_stack = cf_rd_u2(&r);
    out->max_locals = cf_rd_u2(&r);
    out->code_len = cf_rd_u4(&r);
    if (r.bad)
        return cf_fail(err, CF_ERR_CODE, "Code attribute truncated (%u bytes)", a->len);
    if (out->code_len == 0 || out->code_len > 65535)
        return cf_fail(err, CF_ERR_CODE, "code_length %u not in 1..65535", out->code_len);
    out->code = cf_rd_skip(&r, out->code_len);
    out->exc_count = cf_rd_u2(&r);
    if (r.bad || !cf_rd_has(&r, (size_t)out->exc_count * 8))
        return cf_fail(err, CF_ERR_CODE, "Code attribute truncated in code or exception table");
    if (out->exc_count) {
        out->exc = out->exc_count <= 8 ? out->exc_small : malloc(sizeof(cf_exc) * out->exc_count);
        if (!out->exc)
            return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    }
    for (uint16_t i = 0; i < out->exc_count; i++) {
        cf_exc *e = &out->exc[i];
        e->start = cf_rd_u2(&r);
        e->end = cf_rd_u2(&r);
        e->handler = cf_rd_u2(&r);
        e->type = cf_rd_u2(&r);
        cf_exc x = *e; /* copy: cf_code_release frees the table */
        if (x.start >= x.end || x.end > out->code_len || x.handler >= out->code_len) {
            cf_code_release(out);
            return cf_fail(err, CF_ERR_CODE, "exception entry %u: bad range %u..%u handler %u", i, x.start, x.end,
                           x.handler);
        }
        if (x.type && (x.type >= c->cp_count || c->cp[x.type].tag != JVM_CONSTANT_Class)) {
            cf_code_release(out);
            return cf_fail(err, CF_ERR_CPOOL_INDEX, "exception entry %u: catch type #%u is not a Class", i, x.type);
        }
    }
    out->attr_count = cf_rd_u2(&r);
    if (r.bad || (size_t)out->attr_count * 6 > r.len - r.pos) {
        cf_code_release(out);
        return cf_fail(err, CF_ERR_CODE, "Code attribute: bad attributes_count");
    }
    if (out->attr_count) {
        out->attrs = out->attr_count <= 6 ? out->attrs_small : malloc(sizeof(cf_attr) * out->attr_count);
        if (!out->attrs) {
            cf_code_release(out);
            return cf_fail(err, CF_ERR_NOMEM, "out of memory");
        }
    }
    for (uint16_t i = 0; i < out->attr_count; i++) {
        cf_attr *s = &out->attrs[i];
        s->name = cf_rd_u2(&r);
        s->len = cf_rd_u4(&r);
        s->data = cf_rd_skip(&r, s->len);
        if (r.bad || s->name == 0 || s->name >= c->cp_count || c->cp[s->name].tag != JVM_CONSTANT_Utf8) {
            cf_code_release(out);
            return cf_fail(err, CF_ERR_CODE, "Code sub-attribute %u: truncated or bad name", i);
        }
    }
    if (r.pos != r.len) {
        cf_code_release(out);
        return cf_fail(err, CF_ERR_LENGTH, "Code attribute: %zu bytes left over", r.len - r.pos);
    }
    return CF_OK;
}

void cf_code_release(cf_code *code)
{
    if (code->exc != code->exc_small)
        free(code->exc);
    if (code->attrs != code->attrs_small)
        free(code->attrs);
    code->exc = NULL;
    code->attrs = NULL;
}

static int32_t s4(const uint8_t *p)
{
    return (int32_t)cmr_be32(p);
}

bool cf_insn_decode(const uint8_t *code, uint32_t code_len, uint32_t pc, cf_insn *in)
{
    in->kind = CF_K_PLAIN;
    in->wide = 0;
    in->branch = 0;
    in->npairs = 0;
    in->len = 0;
    if (pc >= code_len)
        return false;
    uint8_t op = code[pc];
    in->pc = pc;
    in->op = op;
    uint32_t n = op_len[op];
    if (n == 0)
        return false;
    if (op == JVM_OPC_wide) {
        if (pc + 1 >= code_len)
            return false;
        uint8_t w = code[pc + 1];
        in->op = w;
        in->wide = 1;
        if (w == JVM_OPC_iinc)
            n = 6;
        else if ((w >= JVM_OPC_iload && w <= JVM_OPC_aload) || (w >= JVM_OPC_istore && w <= JVM_OPC_astore) ||
                 w == JVM_OPC_ret)
            n = 4;
        else
            return false;
    } else if (op == JVM_OPC_tableswitch || op == JVM_OPC_lookupswitch) {
        uint32_t base = (pc + 4) & ~3u; /* after padding */
        if ((uint64_t)base + 8 > code_len)
            return false;
        in->branch = s4(code + base);
        if (op == JVM_OPC_tableswitch) {
            if ((uint64_t)base + 12 > code_len)
                return false;
            int32_t lo = s4(code + base + 4), hi = s4(code + base + 8);
            if (lo > hi)
                return false;
            uint64_t cnt = (uint64_t)((int64_t)hi - lo + 1);
            if (base + 12 + cnt * 4 > code_len)
                return false;
            in->npairs = (uint32_t)cnt;
            n = (uint32_t)(base + 12 + cnt * 4 - pc);
            in->kind = CF_K_TABLESWITCH;
        } else {
            int32_t np = s4(code + base + 4);
            if (np < 0 || base + 8 + (uint64_t)np * 8 > code_len)
                return false;
            in->npairs = (uint32_t)np;
            n = (uint32_t)(base + 8 + (uint64_t)np * 8 - pc);
            in->kind = CF_K_LOOKUPSWITCH;
        }
        in->len = n;
        return true;
    }
    if ((uint64_t)pc + n > code_len)
        return false;
    in->len = n;
    if ((op >= JVM_OPC_ifeq && op <= JVM_OPC_jsr) || op == JVM_OPC_ifnull || op == JVM_OPC_ifnonnull) {
        in->kind = CF_K_BRANCH16;
        in->branch = (int16_t)cmr_be16(code + pc + 1);
    } else if (op == JVM_OPC_goto_w || op == JVM_OPC_jsr_w) {
        in->kind = CF_K_BRANCH32;
        in->branch = s4(code + pc + 1);
    } else if (op >= JVM_OPC_ireturn && op <= JVM_OPC_return) {
        in->kind = CF_K_RETURN;
    } else if (op >= JVM_OPC_invokevirtual && op <= JVM_OPC_invokedynamic) {
        in->kind = CF_K_INVOKE;
    }
    return true;
}

int32_t cf_switch_target(const uint8_t *code, const cf_insn *in, uint32_t i, int32_t *key)
{
    assert((in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) && i < in->npairs);
    uint32_t base = (in->pc + 4) & ~3u;
    if (in->kind == CF_K_TABLESWITCH) {
        if (key)
            *key = s4(code + base + 4) + (int32_t)i;
        return s4(code + base + 12 + 4 * i);
    }
    if (key)
        *key = s4(code + base + 8 + 8 * i);
    return s4(code + base + 8 + 8 * i + 4);
}

static bool target_ok(const uint8_t *starts, uint32_t code_len, uint32_t pc, int64_t rel)
{
    int64_t t = (int64_t)pc + rel;
    return t >= 0 && t < code_len && starts[t];
}

/* op_len restricted to instructions decoded as CF_K_PLAIN, except ret (0 = take the full
 * decoder, which also lists the instruction as special) */
static const uint8_t plain_len[256] = {
    /* 0x00 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x10 */ 2, 3, 2, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1,
    /* 0x20 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x30 */ 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1,
    /* 0x40 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x50 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x60 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x70 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x80 */ 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x90 */ 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0,
    /* 0xa0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0xb0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 2, 3, 1, 1,
    /* 0xc0 */ 3, 3, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0xd0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0xe0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0xf0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

cf_err cf_code_decode_ex(const cf_code *code, cf_insn **insns, size_t *insn_cap, uint8_t **starts_p, size_t *starts_cap,
                         uint32_t *pc2i, uint32_t *special, uint32_t *nspecial, uint32_t *n, cf_error *err)
{
    *n = 0;
    uint32_t len = code->code_len, nsp = 0;
    if (CF_GROW(*insns, *insn_cap, len, 256) || CF_GROW(*starts_p, *starts_cap, len, 256))
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    cf_insn *v = *insns;
    uint8_t *starts = *starts_p;
    memset(starts, 0, len);
    uint32_t cnt = 0;
    const uint8_t *cb = code->code;
    for (uint32_t pc = 0; pc < len;) {
        uint8_t op = cb[pc];
        uint32_t l = plain_len[op];
        if (pc2i)
            pc2i[pc] = cnt;
        /* fast path: fixed-length instruction that is not a branch, return, invoke or wide */
        if (l && pc + l <= len) {
            cf_insn *in = &v[cnt++];
            in->pc = pc;
            in->len = l;
            in->op = op;
            in->kind = CF_K_PLAIN;
            in->wide = 0;
            in->branch = 0;
            in->npairs = 0;
            starts[pc] = 1;
            pc += l;
            continue;
        }
        if (!cf_insn_decode(code->code, len, pc, &v[cnt]))
            return cf_fail(err, CF_ERR_CODE, "bad instruction (opcode 0x%02x) at pc %u", code->code[pc], pc);
        starts[pc] = 1;
        pc += v[cnt].len;
        if (special && (v[cnt].kind != CF_K_PLAIN || v[cnt].op == JVM_OPC_ret))
            special[nsp++] = cnt;
        cnt++;
    }
    if (pc2i)
        pc2i[len] = cnt;
    uint32_t nchk = special ? nsp : cnt;
    for (uint32_t q = 0; q < nchk; q++) {
        cf_insn *in = &v[special ? special[q] : q];
        bool ok = true;
        if (in->kind == CF_K_BRANCH16 || in->kind == CF_K_BRANCH32) {
            ok = target_ok(starts, len, in->pc, in->branch);
        } else if (in->kind == CF_K_TABLESWITCH || in->kind == CF_K_LOOKUPSWITCH) {
            ok = target_ok(starts, len, in->pc, in->branch);
            for (uint32_t k = 0; ok && k < in->npairs; k++)
                ok = target_ok(starts, len, in->pc, cf_switch_target(code->code, in, k, NULL));
        }
        if (!ok)
            return cf_fail(err, CF_ERR_CODE,
                           "branch at pc %u targets the middle of an instruction or "
                           "outside the code",
                           in->pc);
    }
    for (uint16_t i = 0; i < code->exc_count; i++) {
        const cf_exc *e = &code->exc[i];
        if (!starts[e->start] || !starts[e->handler] || (e->end < len && !starts[e->end]))
            return cf_fail(err, CF_ERR_CODE, "exception entry %u not on instruction boundaries", i);
    }
    if (nspecial)
        *nspecial = nsp;
    *n = cnt;
    return CF_OK;
}

cf_err cf_code_decode_reuse(const cf_code *code, cf_insn **insns, size_t *insn_cap, uint8_t **starts_p,
                            size_t *starts_cap, uint32_t *n, cf_error *err)
{
    return cf_code_decode_ex(code, insns, insn_cap, starts_p, starts_cap, NULL, NULL, NULL, n, err);
}

cf_err cf_code_decode_all(const cf_code *code, cf_insn **out, uint32_t *n, cf_error *err)
{
    cf_insn *v = NULL;
    uint8_t *starts = NULL;
    size_t vc = 0, sc = 0;
    cf_err e = cf_code_decode_reuse(code, &v, &vc, &starts, &sc, n, err);
    free(starts);
    if (e) {
        free(v);
        *out = NULL;
        *n = 0;
        return e;
    }
    *out = v;
    return CF_OK;
}

/* ---- descriptors ---- */

static int one_type(const char *p, uint32_t len, uint32_t *i)
{
    uint32_t dims = 0;
    while (*i < len && p[*i] == '[') {
        (*i)++;
        dims++;
    }
    if (*i >= len)
        return -1;
    char ch = p[(*i)++];
    switch (ch) {
    case 'B':
    case 'C':
    case 'F':
    case 'I':
    case 'S':
    case 'Z': return 1;
    case 'J':
    case 'D': return dims ? 1 : 2;
    case 'L':
        while (*i < len && p[*i] != ';')
            (*i)++;
        if (*i >= len)
            return -1;
        (*i)++;
        return 1;
    case 'V': return dims ? -1 : 0;
    default: return -1;
    }
}

int cf_desc_arg_words(cf_str d, int *ret_words)
{
    uint32_t i = 0;
    if (d.len < 3 || d.p[0] != '(')
        return -1;
    i = 1;
    int words = 0;
    while (i < d.len && d.p[i] != ')') {
        int w = one_type(d.p, d.len, &i);
        if (w <= 0)
            return -1;
        words += w;
    }
    if (i >= d.len)
        return -1;
    i++;
    int r = one_type(d.p, d.len, &i);
    if (r < 0 || i != d.len)
        return -1;
    if (ret_words)
        *ret_words = r;
    return words;
}

int cf_field_words(cf_str d)
{
    uint32_t i = 0;
    int w = one_type(d.p, d.len, &i);
    if (w <= 0 || i != d.len)
        return -1;
    return w;
}
