/*
 * cf_stackmap.c - StackMapTable (JVMS 4.7.4): decode frames to absolute offsets, and
 * re-encode them at new offsets after code insertion. The instrumenter never infers types:
 * it only moves the frames the compiler wrote, rewrites Uninitialized(offset) entries, and
 * appends the single full frame of its catch-all handler (locals empty, stack [Throwable]).
 */
#include "cf_stackmap.h"

#include <stdlib.h>

/* Skips `count` verification_type_info entries; false on truncation or bad tag. */
static bool skip_vtypes(cf_rd *r, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        uint8_t tag = cf_rd_u1(r);
        if (r->bad || tag > JVM_ITEM_Uninitialized)
            return false;
        if (tag == JVM_ITEM_Object || tag == JVM_ITEM_Uninitialized)
            cf_rd_u2(r);
    }
    return !r->bad;
}

cf_err cf_stackmap_decode(const cf_attr *a, uint32_t code_len, cf_frame **out, uint32_t *n, cf_error *err)
{
    *out = NULL;
    size_t cap = 0;
    cf_err e = cf_stackmap_decode_into(a, code_len, out, &cap, n, err);
    if (e) {
        free(*out);
        *out = NULL;
    }
    return e;
}

cf_err cf_stackmap_decode_into(const cf_attr *a, uint32_t code_len, cf_frame **buf, size_t *cap, uint32_t *n,
                               cf_error *err)
{
    *n = 0;
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    uint16_t count = cf_rd_u2(&r);
    if (r.bad)
        return cf_fail(err, CF_ERR_ATTRIBUTE, "StackMapTable truncated");
    if (count == 0)
        return CF_OK;
    if (count > a->len)
        return cf_fail(err, CF_ERR_ATTRIBUTE, "StackMapTable: bad frame count");
    if (CF_GROW(*buf, *cap, count, 64))
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    cf_frame *v = *buf;
    int64_t pc = -1;
    for (uint16_t i = 0; i < count; i++) {
        cf_frame *f = &v[i];
        f->type = cf_rd_u1(&r);
        uint32_t delta;
        bool ok = true;
        if (f->type <= CF_FRAME_SAME_MAX) {
            delta = f->type;
            f->body = r.p + r.pos;
        } else if (f->type <= CF_FRAME_SAME_LOCALS_1_STACK_ITEM_MAX) {
            delta = f->type - (uint32_t)CF_FRAME_SAME_LOCALS_1_STACK_ITEM;
            f->body = r.p + r.pos;
            ok = skip_vtypes(&r, 1);
        } else if (f->type < CF_FRAME_SAME_LOCALS_1_STACK_ITEM_EXTENDED) { /* reserved */
            ok = false;
            delta = 0;
        } else {
            delta = cf_rd_u2(&r);
            f->body = r.p + r.pos;
            if (f->type == CF_FRAME_SAME_LOCALS_1_STACK_ITEM_EXTENDED)
                ok = skip_vtypes(&r, 1);
            else if (f->type >= CF_FRAME_APPEND && f->type <= CF_FRAME_APPEND_MAX)
                ok = skip_vtypes(&r, f->type - (uint32_t)CF_FRAME_SAME_EXTENDED);
            else if (f->type == CF_FRAME_FULL) {
                uint16_t nl = cf_rd_u2(&r);
                ok = skip_vtypes(&r, nl);
                uint16_t ns = cf_rd_u2(&r);
                ok = ok && skip_vtypes(&r, ns);
            }
        }
        if (!ok || r.bad) {
            uint8_t type = f->type;
            return cf_fail(err, CF_ERR_ATTRIBUTE, "StackMapTable frame %u: bad type %u or truncated", i, type);
        }
        f->body_len = (uint32_t)(r.p + r.pos - f->body);
        pc = pc < 0 ? delta : pc + delta + 1;
        if (pc >= code_len) {
            return cf_fail(err, CF_ERR_ATTRIBUTE, "StackMapTable frame %u at pc %lld past code end", i, (long long)pc);
        }
        f->pc = (uint32_t)pc;
    }
    if (r.pos != r.len)
        return cf_fail(err, CF_ERR_ATTRIBUTE, "StackMapTable: %zu bytes left over", r.len - r.pos);
    *n = count;
    return CF_OK;
}

/* Copies verification types from body to b, remapping Uninitialized offsets. */
static bool copy_body(cf_buf *b, const uint8_t *p, uint32_t len, cf_pc_map map, void *ud, uint8_t type)
{
    cf_rd r;
    cf_rd_init(&r, p, len);
    uint32_t groups = 1, counts[2] = {0, 0};
    if (type >= CF_FRAME_SAME_LOCALS_1_STACK_ITEM && type <= CF_FRAME_SAME_LOCALS_1_STACK_ITEM_MAX)
        counts[0] = 1;
    else if (type == CF_FRAME_SAME_LOCALS_1_STACK_ITEM_EXTENDED)
        counts[0] = 1;
    else if (type >= CF_FRAME_APPEND && type <= CF_FRAME_APPEND_MAX)
        counts[0] = type - (uint32_t)CF_FRAME_SAME_EXTENDED;
    else if (type == CF_FRAME_FULL)
        groups = 2;
    for (uint32_t g = 0; g < groups; g++) {
        uint32_t cnt = counts[g];
        if (type == CF_FRAME_FULL) {
            cnt = cf_rd_u2(&r);
            cf_buf_u2(b, (uint16_t)cnt);
        }
        for (uint32_t i = 0; i < cnt; i++) {
            uint8_t tag = cf_rd_u1(&r);
            cf_buf_u1(b, tag);
            if (tag == JVM_ITEM_Object)
                cf_buf_u2(b, cf_rd_u2(&r));
            else if (tag == JVM_ITEM_Uninitialized) {
                uint32_t np;
                if (!map(ud, cf_rd_u2(&r), &np) || np > 65535)
                    return false;
                cf_buf_u2(b, (uint16_t)np);
            }
        }
    }
    return !r.bad && r.pos == r.len && !b->oom;
}

/* A frame whose delta is in its type (base + delta) while it fits, else the extended form
 * with an explicit u2 delta. */
static void put_short_or_extended(cf_buf *b, uint8_t base, uint8_t extended, uint16_t delta)
{
    if (delta <= CF_FRAME_SAME_MAX) {
        cf_buf_u1(b, (uint8_t)(base + delta));
    } else {
        cf_buf_u1(b, extended);
        cf_buf_u2(b, delta);
    }
}

bool cf_stackmap_put_frame(cf_buf *b, const cf_frame *f, int64_t prev_pc, uint32_t new_pc, cf_pc_map map, void *ud)
{
    int64_t d = prev_pc < 0 ? new_pc : (int64_t)new_pc - prev_pc - 1;
    if (d < 0 || d > 65535)
        return false;
    uint16_t delta = (uint16_t)d;
    uint8_t t = f->type;
    if (t <= CF_FRAME_SAME_MAX) {
        put_short_or_extended(b, CF_FRAME_SAME, CF_FRAME_SAME_EXTENDED, delta);
        return !b->oom;
    }
    if (t <= CF_FRAME_SAME_LOCALS_1_STACK_ITEM_MAX) {
        put_short_or_extended(b, CF_FRAME_SAME_LOCALS_1_STACK_ITEM, CF_FRAME_SAME_LOCALS_1_STACK_ITEM_EXTENDED, delta);
        return copy_body(b, f->body, f->body_len, map, ud, t);
    }
    cf_buf_u1(b, t);
    cf_buf_u2(b, delta);
    return copy_body(b, f->body, f->body_len, map, ud, t);
}

/* ---- expansion ---- */

static bool read_vtypes(cf_rd *r, uint32_t count, cf_vtype *out)
{
    for (uint32_t i = 0; i < count; i++) {
        out[i].tag = cf_rd_u1(r);
        out[i].v = (out[i].tag == JVM_ITEM_Object || out[i].tag == JVM_ITEM_Uninitialized) ? cf_rd_u2(r) : 0;
        if (r->bad || out[i].tag > JVM_ITEM_Uninitialized)
            return false;
    }
    return true;
}

/* One walk over the frames. With x == NULL only counts the entries (*total). */
static bool expand_walk(const cf_frame *frames, uint32_t n, const cf_vtype *init, uint16_t ninit, cf_vtype *locals,
                        size_t cap, cf_xframe *x, cf_vtype *pool, size_t *total)
{
    size_t cur = ninit, used = 0;
    if (locals)
        memcpy(locals, init, sizeof(cf_vtype) * ninit);
    for (uint32_t i = 0; i < n; i++) {
        const cf_frame *f = &frames[i];
        cf_rd r;
        cf_rd_init(&r, f->body, f->body_len);
        cf_vtype stack[1];
        uint32_t ns = 0;
        const uint8_t *stack_body = NULL; /* full frame: stack entries still to read */
        uint8_t t = f->type;
        bool ok = true;
        if (t <= CF_FRAME_SAME_MAX || t == CF_FRAME_SAME_EXTENDED) {
        } else if (t <= CF_FRAME_SAME_LOCALS_1_STACK_ITEM_MAX || t == CF_FRAME_SAME_LOCALS_1_STACK_ITEM_EXTENDED) {
            ok = read_vtypes(&r, 1, stack);
            ns = 1;
        } else if (t >= CF_FRAME_CHOP && t <= CF_FRAME_CHOP_MAX) {
            uint32_t k = (uint32_t)CF_FRAME_SAME_EXTENDED - t;
            if (k > cur)
                ok = false;
            else
                cur -= k;
        } else if (t >= CF_FRAME_APPEND && t <= CF_FRAME_APPEND_MAX) {
            uint32_t k = t - (uint32_t)CF_FRAME_SAME_EXTENDED;
            assert(k >= 1 && k <= 3);
            if (cur + k > cap)
                ok = false;
            else {
                cf_vtype tmp[3];
                ok = read_vtypes(&r, k, tmp);
                if (locals)
                    memcpy(locals + cur, tmp, sizeof(cf_vtype) * k);
                cur += k;
            }
        } else if (t == CF_FRAME_FULL) {
            uint16_t nl = cf_rd_u2(&r);
            if (nl > cap)
                ok = false;
            else {
                for (uint16_t q = 0; q < nl && ok; q++) {
                    cf_vtype v;
                    ok = read_vtypes(&r, 1, &v);
                    if (locals)
                        locals[q] = v;
                }
                cur = nl;
                ns = cf_rd_u2(&r);
                stack_body = r.p + r.pos;
                ok = ok && !r.bad;
            }
        } else {
            ok = false;
        }
        if (!ok)
            return false;
        if (x) {
            x[i].nl = (uint16_t)cur;
            x[i].ns = (uint16_t)ns;
            x[i].v = pool + used;
            memcpy(pool + used, locals, sizeof(cf_vtype) * cur);
            if (stack_body) {
                cf_rd r2;
                cf_rd_init(&r2, stack_body, f->body_len - (uint32_t)(stack_body - f->body));
                if (!read_vtypes(&r2, ns, pool + used + cur))
                    return false;
            } else if (ns) {
                pool[used + cur] = stack[0];
            }
        }
        used += cur + ns;
    }
    *total = used;
    return true;
}

bool cf_stackmap_expand(const cf_frame *frames, uint32_t n, const cf_vtype *init, uint16_t ninit, cf_xframe **out)
{
    *out = NULL;
    size_t cap = ninit, total = 0;
    for (uint32_t i = 0; i < n; i++)
        cap += frames[i].body_len; /* bounds any locals count */
    if (cap > 65535)
        cap = 65535;
    if (!expand_walk(frames, n, init, ninit, NULL, cap, NULL, NULL, &total))
        return false;
    cf_xframe *x = malloc(sizeof(cf_xframe) * (n ? n : 1) + sizeof(cf_vtype) * (total + cap + 1));
    if (!x)
        return false;
    cf_vtype *pool = (cf_vtype *)(x + n);
    cf_vtype *locals = pool + total;
    if (!expand_walk(frames, n, init, ninit, locals, cap, x, pool, &total)) {
        free(x);
        return false;
    }
    *out = x;
    return true;
}

bool cf_stackmap_put_full(cf_buf *b, const cf_xframe *x, int64_t prev_pc, uint32_t new_pc, cf_pc_map map, void *ud)
{
    int64_t d = prev_pc < 0 ? new_pc : (int64_t)new_pc - prev_pc - 1;
    if (d < 0 || d > 65535)
        return false;
    cf_buf_u1(b, CF_FRAME_FULL);
    cf_buf_u2(b, (uint16_t)d);
    for (int part = 0; part < 2; part++) {
        uint16_t cnt = part == 0 ? x->nl : x->ns;
        const cf_vtype *v = x->v + (part == 0 ? 0 : x->nl);
        cf_buf_u2(b, cnt);
        for (uint16_t i = 0; i < cnt; i++) {
            cf_buf_u1(b, v[i].tag);
            if (v[i].tag == JVM_ITEM_Object)
                cf_buf_u2(b, v[i].v);
            else if (v[i].tag == JVM_ITEM_Uninitialized) {
                uint32_t np;
                if (!map(ud, v[i].v, &np) || np > 65535)
                    return false;
                cf_buf_u2(b, (uint16_t)np);
            }
        }
    }
    return !b->oom;
}
