/*
 * cmr/classfile.h - the CMR class-file engine (public API).
 *
 * What it is for: the CMR instrumenter receives the bytes of JVM classes and must
 *   - parse and write them (versions 45..69, every constant-pool tag, every attribute;
 *     an unmodified class is written back byte-identical),
 *   - insert probe calls (method entry, every normal return, exceptional exit) described
 *     by one generic cf_probe description,
 *   - list the callees of a method (invoke* opcodes resolved through the constant pool),
 *   - compute method ids (XXH3-64 of "internal/Name.method(descriptor)").
 *
 * How it fits: cf_parse.c builds a cf_class that borrows the input bytes; cf_write.c writes
 * a cf_class back; cf_instrument.c rewrites Code attributes in a cf_class (using cf_code.c
 * for instruction decoding/relocation and cf_stackmap.c for StackMapTable); cf_callees.c and
 * cf_methodid.c are read-only queries. Nothing here loads or asks for other classes.
 *
 * Ownership: every function that returns memory says who frees it. A cf_class borrows the
 * input buffer given to cf_class_parse(): the buffer must outlive the cf_class. Everything
 * else a cf_class points to is owned by it and released by cf_class_free().
 *
 * Errors: every failing call returns a cf_err code and fills a cf_error with a message;
 * malformed input never crashes nor reads out of bounds.
 */
#ifndef CMR_CLASSFILE_H
#define CMR_CLASSFILE_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/cf_constants.h" /* JVM_OPC_*, JVM_ACC_*, JVM_CONSTANT_* ... */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

typedef enum cf_err {
    CF_OK = 0,
    CF_ERR_TRUNCATED,   /* input ends inside a structure */
    CF_ERR_MAGIC,       /* not 0xCAFEBABE */
    CF_ERR_VERSION,     /* major version outside 45..69 */
    CF_ERR_CPOOL_TAG,   /* unknown constant-pool tag */
    CF_ERR_CPOOL_INDEX, /* index out of range or refers to an entry of the wrong kind */
    CF_ERR_CPOOL_VALUE, /* bad value inside an entry (method-handle kind, bad UTF-8 ...) */
    CF_ERR_LENGTH,      /* a length or count disagrees with the data */
    CF_ERR_TRAILING,    /* bytes after the end of the class */
    CF_ERR_CODE,        /* malformed Code attribute or bytecode */
    CF_ERR_ATTRIBUTE,   /* malformed well-known attribute (StackMapTable, tables ...) */
    CF_ERR_LIMIT,       /* a class-file limit would be exceeded (constant pool ...) */
    CF_ERR_ARG,         /* bad argument from the caller (bad probe description ...) */
    CF_ERR_NOMEM,
    CF_ERR_REFUSED /* instrumentation refused: see cf_refusal */
} cf_err;

#define CF_ERROR_MSG_MAX 200
typedef struct cf_error {
    cf_err code;
    char msg[CF_ERROR_MSG_MAX];
} cf_error;

/* Static name of an error code ("truncated", ...). */
const char *cf_err_name(cf_err e);

/* ------------------------------------------------------------ the class */

/* A string inside the class file (modified UTF-8, not NUL-terminated). */
typedef struct cf_str {
    const char *p;
    uint32_t len;
} cf_str;

/* One constant-pool slot. Slot 0 and the slot after a Long/Double have tag 0. */
typedef struct cf_const {
    uint8_t tag;
    uint8_t kind;        /* MethodHandle reference_kind */
    uint16_t a, b;       /* referenced indices (meaning depends on tag) */
    const uint8_t *data; /* bytes after the tag (Utf8: the string bytes) */
    uint32_t len;        /* length of data */
} cf_const;

typedef struct cf_attr {
    uint16_t name; /* constant-pool index of the attribute name */
    uint32_t len;
    const uint8_t *data; /* borrowed from the input or owned by the class */
} cf_attr;

typedef struct cf_member { /* field_info or method_info */
    uint16_t access, name, desc;
    uint16_t attr_count;
    cf_attr *attrs;
} cf_member;

typedef struct cf_arena cf_arena;

typedef struct cf_class {
    uint16_t minor, major;
    uint16_t cp_count; /* as in the class file: slots 1..cp_count-1 are used */
    size_t cp_cap;     /* slots allocated */
    cf_const *cp;      /* malloc'ed (grows as the engine appends); freed by cf_class_free */
    /* The parsed pool's bytes (entries 1..cp_raw_count-1): written back verbatim unless
   * CF_WRITE_REENCODE is asked for. Entries are only ever appended by the engine; set
   * cp_raw to NULL after changing an existing entry. */
    const uint8_t *cp_raw;
    uint32_t cp_raw_len;
    uint16_t cp_raw_count;
    uint16_t access, this_class, super_class;
    uint16_t iface_count;
    const uint8_t *ifaces; /* raw u2 array */
    uint16_t field_count, method_count, attr_count;
    cf_member *fields, *methods;
    cf_attr *attrs;
    cf_arena *arena; /* owns everything above except the input bytes, cp and cp_index */
    /* Hash index of the pool for the engine's find-or-add (cf_cpool.c): built once a class
     * has had CF_CP_SCANS_BEFORE_INDEX searches, malloc'ed, freed by cf_class_free. Slots
     * hold pool indexes, 0 = empty. cp_scans counts the searches made without it. */
    uint16_t *cp_index;
    uint32_t cp_index_mask, cp_index_used;
    uint32_t cp_scans;
} cf_class;

/* Parses `len` bytes. On success *out is a new cf_class (free with cf_class_free) that
 * borrows `bytes`. Validates the whole structure and the constant pool's cross references. */
cf_err cf_class_parse(const uint8_t *bytes, size_t len, cf_class **out, cf_error *err);
void cf_class_free(cf_class *c);

/* Writes the class. *out is malloc'ed (caller frees). */
cf_err cf_class_write(const cf_class *c, uint8_t **out, size_t *out_len, cf_error *err);
/* CF_WRITE_REENCODE: encode every constant from its decoded fields instead of copying the
 * parsed pool (the corpus test checks both ways reproduce the input). */
#define CF_WRITE_REENCODE 1u
cf_err cf_class_write_flags(const cf_class *c, unsigned flags, uint8_t **out, size_t *out_len, cf_error *err);
/* Exact size cf_class_write would produce. */
size_t cf_class_size(const cf_class *c);

/* Constant-pool accessors (return 0 / empty on a bad index). */
cf_str cf_cp_utf8(const cf_class *c, uint16_t idx);
cf_str cf_cp_class_name(const cf_class *c, uint16_t class_idx);
cf_str cf_class_name(const cf_class *c);
/* Finds an attribute by name among `attrs`; NULL if absent. */
const cf_attr *cf_attr_find(const cf_class *c, const cf_attr *attrs, uint16_t n, const char *name);

/* Calls fn with the constant-pool index of the type descriptor of every annotation of a
 * Runtime(In)VisibleAnnotations attribute, in order. fn returns 0 to go on, anything else
 * to stop (returned). 0, or -1 when the attribute is malformed (fn was called for the
 * annotations before the damage). */
typedef int(cf_annotation_type_fn)(uint16_t type_index, void *ud);
int cf_annotation_types(const cf_attr *a, cf_annotation_type_fn *fn, void *ud);

/* ------------------------------------------------------------ method ids */

/* XXH3-64 of the UTF-8 string "owner.name(desc)..." e.g. "java/lang/String.length()I".
 * Modified UTF-8 from the class file is converted to standard UTF-8 first. */
uint64_t cf_method_id(const cf_class *c, const cf_member *m);
uint64_t cf_method_id_of(cf_str owner, cf_str name, cf_str desc);

/* ------------------------------------------------------------- callees */

typedef struct cf_callee {
    uint32_t pc;
    uint8_t opcode;       /* JVM_OPC_invokevirtual..JVM_OPC_invokedynamic */
    uint8_t is_interface; /* target is an InterfaceMethodref */
    cf_str owner, name, desc;
    /* invokedynamic only: the bootstrap method handle's target (owner/name/desc),
   * name/desc above are the call site's. */
    cf_str bsm_owner, bsm_name, bsm_desc;
    /* invokedynamic only: the first MethodHandle among the bootstrap's static arguments
   * whose reference kind is a method call (5..9: invokeVirtual, invokeStatic,
   * invokeSpecial, newInvokeSpecial, invokeInterface). For LambdaMetafactory (metafactory,
   * altMetafactory) it is the implementation method: the lambda body (lambda$x$0) or the
   * method reference's target. impl_kind 0 (strings empty) when there is none. */
    uint8_t impl_kind;
    cf_str impl_owner, impl_name, impl_desc;
} cf_callee;

/* Lists every invoke* in method m, in code order. *out is malloc'ed (caller frees; may be
 * NULL when *n == 0). Strings point into the class. */
cf_err cf_method_callees(const cf_class *c, const cf_member *m, cf_callee **out, size_t *n, cf_error *err);

/* ------------------------------------------------------- trivial methods */

/* Methods whose own work is a few nanoseconds, less than a probe pair costs: recording them
 * multiplies a program's time and says nothing about where it goes. The instrumenter leaves
 * them out unless a sensor assignment asks for them (`trivial: true`, docs/ENVIRONMENTS.md).
 *
 *   GETTER  exactly  aload_0 getfield #f xreturn   (static: getstatic #f xreturn)
 *   SETTER  exactly  aload_0 xload_1 putfield #f return   (static: xload_0 putstatic #f return)
 *   LEAF    a tiny leaf: code_length <= CF_TRIVIAL_MAX_CODE bytes, no exception table, not
 *           synchronized, and no instruction that calls (invoke*), allocates (new, newarray,
 *           anewarray, multianewarray), locks (monitorenter/exit), throws (athrow), jumps to
 *           a subroutine (jsr, jsr_w, ret) or branches backwards (goto, if*, switch targets
 *           at or before the instruction: no loop). Such a method runs each instruction at
 *           most once: at most CF_TRIVIAL_MAX_CODE bytecodes, a few ns once compiled.
 * Constructors, static initializers, abstract and native methods are never trivial. The
 * threshold is HotSpot's MaxInlineSize (35 bytes): methods this small are inlined anyway,
 * and a probe call inside them is what is left of their cost. */
#define CF_TRIVIAL_MAX_CODE 35

typedef enum cf_trivial_kind {
    CF_TRIVIAL_NO = 0,
    CF_TRIVIAL_GETTER,
    CF_TRIVIAL_SETTER,
    CF_TRIVIAL_LEAF,
} cf_trivial_kind;

/* Classifies method m of c (CF_TRIVIAL_NO when its code does not decode). */
cf_trivial_kind cf_method_trivial(const cf_class *c, const cf_member *m);
/* "no", "getter", "setter", "leaf" */
const char *cf_trivial_name(cf_trivial_kind k);

/* -------------------------------------------------------- instrumentation */

/* One generic probe description. At each site (entry, each normal return, exceptional
 * exit) the engine pushes the constant arguments and calls a static method
 * owner.name(desc); a non-void result is popped. A site whose owner is NULL gets no call.
 * Different probe kinds (timer, anchor, conditional ...) are different descriptions.
 *
 * Instrumented method: [entry call] at pc 0 (in constructors right after each
 * super()/this() call), [normal-exit call] before every xRETURN (branches to the return land
 * on it), and a catch-all handler appended at the end - [exceptional-exit call] athrow -
 * covering the code after the entry call (in constructors: exactly the code that runs after
 * initialization). No locals are added; the only new StackMapTable frame is the handler's
 * full_frame(locals=[], stack=[java/lang/Throwable]), plus full frames for the rare goto_w
 * trampolines of far conditional branches. Probe calls can be stacked: instrumenting an
 * instrumented class again (another probe kind) works. */
typedef enum cf_parg_kind {
    CF_PARG_METHOD_ID,     /* J: the method id of the instrumented method */
    CF_PARG_LONG,          /* J: constant `i` */
    CF_PARG_INT,           /* I (or Z/B/C/S): constant `i` */
    CF_PARG_STRING,        /* Ljava/lang/String;: constant `s` */
    CF_PARG_METHOD_NAME,   /* Ljava/lang/String;: "owner.name(desc)" of the method */
    CF_PARG_THROWABLE,     /* Ljava/lang/Throwable; (or Object): the exception; exceptional
                          site only, first argument only */
    CF_PARG_THIS,          /* Ljava/lang/Object;: the method's own object (instance methods;
                          entry and normal-exit sites; constructors: after super()) */
    CF_PARG_ARG,           /* Ljava/lang/Object;: parameter number `i` (0-based, reference
                          typed; entry site only) */
    CF_PARG_RETURN,        /* the value the method returns (normal-exit site only, first
                          argument only): Ljava/lang/Object; for a reference, I for an int,
                          boolean, byte, char or short, J for a long; a method that returns
                          another type is refused */
    CF_PARG_ARG_REPLACED,  /* as CF_PARG_ARG, and the probe's result replaces that parameter:
                          cast to its type and stored in its local, so the method goes on
                          with what the probe gave (a copy of a request with headers
                          added). Entry site only, at most one, the desc returns a
                          reference; a method that assigns the parameter is refused */
    CF_PARG_THIS_INT_FIELD /* I: the int field named `s` of the method's own object, read
                          with getfield through the instrumented class (declared there or
                          in a superclass, protected included: the class file alone cannot
                          tell, so a name it does not have fails when the JVM links the
                          method; rules name fields of the Java SE API only). Entry and
                          normal-exit sites of instance methods */
} cf_parg_kind;

typedef struct cf_parg {
    cf_parg_kind kind;
    int64_t i;
    const char *s;
} cf_parg;

#define CF_PROBE_MAX_ARGS 4
typedef struct cf_probe_call {
    const char *owner; /* internal name, e.g. "cmr/probe/Timer"; NULL = no call here */
    const char *name;
    const char *desc; /* must match args, e.g. "(J)V" */
    uint8_t nargs;
    cf_parg args[CF_PROBE_MAX_ARGS];
} cf_probe_call;

typedef struct cf_probe {
    const char *kind; /* free text for reports, e.g. "timer" */
    cf_probe_call enter, normal_exit, exc_exit;
} cf_probe;

typedef enum cf_refusal {
    CF_REFUSE_NONE = 0,
    CF_REFUSE_ABSTRACT_OR_NATIVE, /* no code */
    CF_REFUSE_JSR_RET,            /* jsr/ret in a class file >= 50 (frames cannot describe them);
                                    older class files are instrumented */
    CF_REFUSE_CODE_TOO_LARGE,     /* result would exceed 65535 bytes of code */
    CF_REFUSE_STACK_TOO_LARGE,    /* max_stack would exceed 65535 */
    CF_REFUSE_BRANCH_NEEDS_FRAME, /* a far conditional branch needs a frame nobody can give:
                                    no fall-through frame and no trampoline place in reach */
    CF_REFUSE_CTOR_INIT,          /* constructor: no super()/this() call on uninitializedThis,
                                    or code after such a call is also reached before it */
    CF_REFUSE_BAD_CODE,           /* bytecode or tables inconsistent (bad branch target ...) */
    CF_REFUSE_CONSTANT_POOL_FULL, /* not enough constant-pool slots */
    CF_REFUSE_OBJECT_INIT,        /* java/lang/Object.<init>: special-cased by HotSpot (finalizer
                                    registration, JIT); instrumenting it crashes the JIT */
    CF_REFUSE_PROBE_ARGS,         /* the probe wants `this` or a parameter the method cannot give
                                    (static method, primitive parameter, slot reassigned) */
    CF_REFUSE__COUNT
} cf_refusal;

const char *cf_refusal_name(cf_refusal r);

typedef struct cf_method_result {
    uint16_t method_index;
    cf_str name, desc; /* point into the class (cf_instrument_class: into `bytes`) */
    uint64_t method_id;
    cf_refusal refusal;         /* CF_REFUSE_NONE = instrumented */
    char why[CF_ERROR_MSG_MAX]; /* text of the refusal */
} cf_method_result;

/* Instruments method number `method_index` of c in place. On refusal returns
 * CF_ERR_REFUSED, fills *res (refusal + text) and leaves c unchanged. */
cf_err cf_instrument_method(cf_class *c, uint16_t method_index, const cf_probe *p, cf_method_result *res,
                            cf_error *err);

/* Decides per method; NULL filter = every method. */
typedef int (*cf_method_filter)(const cf_class *c, const cf_member *m, void *ud);

typedef struct cf_instrument_result {
    uint8_t *bytes; /* new class bytes, malloc'ed (caller frees); NULL if nothing
                              was instrumented (then use the original bytes) */
    size_t len;
    uint32_t n_methods; /* methods considered */
    uint32_t n_instrumented;
    cf_method_result *methods; /* malloc'ed array of n_methods (caller frees) */
} cf_instrument_result;

/* Parses `bytes`, instruments every selected method (refused methods are left as they
 * were), writes the new class. Frees nothing of the input. */
cf_err cf_instrument_class(const uint8_t *bytes, size_t len, const cf_probe *p, cf_method_filter filter, void *ud,
                           cf_instrument_result *out, cf_error *err);
void cf_instrument_result_free(cf_instrument_result *r);

/* Stacked probes: instruments `bytes` with probes[0], its output with probes[1], and so on
 * (each pass by cf_instrument_class, every method). out->bytes is the final class
 * (malloc'ed, caller frees; NULL when no pass changed anything); out->methods, n_methods and
 * n_instrumented are those of the first pass (names point into `bytes`). When `each` is not
 * NULL it is called after every pass with that pass's result, valid during the call only.
 * On an error no output is left in *out. */
typedef void (*cf_pass_fn)(unsigned pass, const cf_instrument_result *r, void *ud);
cf_err cf_instrument_stacked(const uint8_t *bytes, size_t len, const cf_probe *const *probes, unsigned n,
                             cf_pass_fn each, void *ud, cf_instrument_result *out, cf_error *err);

/* Structural check of a class (used on instrumented output by the tests): parses it, decodes
 * every method's code, checks branch/switch targets, exception ranges, StackMapTable frame
 * offsets, line-number and local-variable ranges against instruction boundaries. */
cf_err cf_class_check(const uint8_t *bytes, size_t len, cf_error *err);

/* Checks that a probe description is well formed. */
cf_err cf_probe_check(const cf_probe *p, cf_error *err);

#ifdef __cplusplus
}
#endif
#endif
