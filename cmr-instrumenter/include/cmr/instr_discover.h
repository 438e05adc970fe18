/*
 * instr_discover.h - the "Discover" step of a diagnosis: from a method the user selected
 * (a slow method), find the methods callable from it by reading bytecode, down to a depth,
 * so that a later step can instrument them conditionally (only while the selected method
 * runs).
 *
 * How it fits: a pure module of the instrumenter, with no Kafka and no RocksDB. Classes come
 * from a cmr_disc_source_t that the instrumenter implements over its class cache for one
 * agent (instr_cache.h: loaded classes by loader + name -> class hash, bytes by hash, meta
 * by hash); the tests implement it over a directory of .class files. Call sites are read
 * with the class-file engine (cf_method_callees, classfile.h); method ids are
 * cf_method_id_of(owner, name, desc) of the declaring class, the ids the probes report.
 *
 * What a node's children are (breadth first, from the root down to max_depth): the targets
 * of its call sites, each distinct target once per parent (call_sites counts the sites).
 *   - invokestatic / invokespecial (private methods, super calls, constructors): the method
 *     in the call site's owner or, when not declared there, in the nearest superclass that
 *     declares it (then a default method of an interface).
 *   - invokevirtual / invokeinterface: every implementation among the classes the agent
 *     LOADED: for the static owner and for each of its loaded subtypes (transitively, through
 *     superclasses and interfaces), the method that a receiver of that class would run
 *     (declared there or inherited), distinct, with code. An interface with N loaded
 *     implementations gives N children. When there is none, one node for the owner's own
 *     declaration (NO_CODE when abstract). JDK owners (say Runnable.run) give a JDK leaf plus
 *     the implementations in loaded non-JDK classes; java/lang/Object's methods are never
 *     expanded to subtypes (every class overrides toString). At most max_impls per site
 *     (the rest are counted in truncated_sites).
 *   - invokedynamic with LambdaMetafactory (metafactory, altMetafactory): the lambda body
 *     (lambda$x$0) or the method reference's target (via LAMBDA), resolved by its handle's
 *     kind as above (a virtual method reference dispatches like invokevirtual).
 *     StringConcatFactory: skipped (string concatenation runs no application code). Any
 *     other bootstrap: one DYNAMIC node for the bootstrap method itself (a JDK leaf for
 *     ObjectMethods, SwitchBootstraps ...; user bootstraps are expanded).
 * A method that is not expanded is a leaf with a status saying why (cmr_disc_status_t).
 *
 * Determinism: children in call-site order, the implementations of one site by class name;
 * the same source gives the same tree (a replay gives the same tree).
 *
 * Bounds: at most max_nodes nodes (the roots always fit); when the tree reaches max_nodes, its last
 * node is TOO_MANY (it stands for itself and whatever was left out) and the walk stops. Memory:
 * the tree, the class files of the classes touched (each parsed once per discovery) and,
 * when a virtual call is met, the agent's type hierarchy (names only).
 *
 * Malformed class bytes from the source are not an error: the node gets NOT_LOADED and the
 * reason is logged (event disc_class).
 *
 * Ownership: cmr_disc_discover fills a tree the caller releases with cmr_disc_tree_free();
 * every string in it is owned by the tree. The source's strings are copied when kept.
 * Not thread-safe per call; separate calls share nothing.
 */
#ifndef CMR_INSTR_DISCOVER_H
#define CMR_INSTR_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"

/* Where classes come from: the instrumenter implements this over its cache for one agent. */
typedef struct cmr_disc_source {
    void *ud;
    /* The class file of internal name `name` as this agent loaded it: 1 and the bytes appended
     * to out, 0 unknown (not loaded, or the bytes were not kept), -1 error (the discovery
     * fails). */
    int (*class_bytes)(void *ud, const char *name, cmr_buf_t *out);
    /* Calls fn(name, superclass (NULL for none), interfaces) for every class the agent loaded
     * (used for virtual and interface dispatch); the strings are valid during the call only.
     * A non-zero return of fn stops the iteration and is returned. 0, or -1 on error. */
    int (*each_class)(void *ud,
                      int (*fn)(void *fnud, const char *name, const char *super, const char *const *ifaces,
                                size_t nifaces),
                      void *fnud);
} cmr_disc_source_t;

typedef struct cmr_disc_opts {
    int max_depth;    /* callees down to this depth (root = 0); 0 = default 3 */
    size_t max_nodes; /* 0 = default 2000 */
    size_t max_impls; /* implementations per virtual call site; 0 = default 64 */
    bool include_jdk; /* expand JDK classes too (false: they are JDK leaves) */
    /* What the operator excluded: EXCLUDED leaves (no probe, callees not entered through
     * them; other paths to those callees still are). Each entry is either a class-name
     * prefix ("com/acme/gen/": every class whose internal name starts with it) or, when it
     * holds a '.', one method: "com/acme/Cart.add" (every overload) or
     * "com/acme/Cart.add(I)V" (one), matched exactly against a node's declaring class,
     * name and descriptor (never as a prefix). The roots are never excluded. */
    const char *const *exclude;
    size_t nexclude;
} cmr_disc_opts_t;

typedef enum cmr_disc_status {
    CMR_DISC_FOUND,      /* expanded: its callees are its children (at depth < max_depth) */
    CMR_DISC_NOT_LOADED, /* no bytes: never loaded by this agent, bytes not kept, malformed,
                             or the method is not found where the call site says */
    CMR_DISC_JDK,        /* a JDK class (java/, javax/, jdk/, sun/, com/sun/ ...) */
    CMR_DISC_EXCLUDED,   /* an excluded prefix or method (opts.exclude), or a class never
                             instrumented (instr_exclude.h) */
    CMR_DISC_NO_CODE,    /* abstract or native */
    CMR_DISC_REPEATED,   /* recursion, or already in the tree: expanded at its first place */
    CMR_DISC_DEPTH,      /* has code but is at max_depth: not expanded */
    CMR_DISC_TOO_MANY    /* max_nodes reached here: not expanded, the walk stopped */
} cmr_disc_status_t;

typedef enum cmr_disc_via {
    CMR_DISC_ROOT,
    CMR_DISC_STATIC,    /* invokestatic */
    CMR_DISC_SPECIAL,   /* invokespecial: private, super.m(), constructor */
    CMR_DISC_VIRTUAL,   /* invokevirtual */
    CMR_DISC_INTERFACE, /* invokeinterface */
    CMR_DISC_LAMBDA,    /* lambda body / method reference made by LambdaMetafactory */
    CMR_DISC_DYNAMIC    /* another invokedynamic bootstrap: the bootstrap method */
} cmr_disc_via_t;

typedef struct cmr_disc_node {
    uint64_t method_id; /* cf_method_id_of(owner, name, desc) */
    char *owner;        /* declaring class (for a leaf: the class where the search stopped) */
    char *name, *desc;
    uint32_t parent;     /* index of the parent node; UINT32_MAX for a root */
    uint16_t depth;      /* root = 0 */
    uint8_t via;         /* cmr_disc_via_t */
    uint8_t status;      /* cmr_disc_status_t */
    uint32_t call_sites; /* call sites in the parent that reach this target (roots: 0) */
} cmr_disc_node_t;

typedef struct cmr_disc_tree {
    cmr_disc_node_t *nodes; /* breadth-first order: a parent comes before its children */
    size_t n;
    size_t classes_read;     /* class files parsed */
    size_t unknown_subtypes; /* loaded subtypes whose bytes were unknown (dispatch through
                                 them may be missed) */
    size_t truncated_sites;  /* virtual call sites cut at max_impls */
    bool truncated;          /* max_nodes reached */
} cmr_disc_tree_t;

/* Discovers the callees of owner.name(desc); desc NULL: every overload of name in owner (one
 * root each, in method order). 0 with *out filled, or -1 with a reason in err (the class of
 * the root unknown or malformed, no such method, the source failed, out of memory); *out is
 * then empty. */
int cmr_disc_discover(const cmr_disc_source_t *src, const char *owner, const char *name, const char *desc,
                      const cmr_disc_opts_t *o, cmr_disc_tree_t *out, char *err, size_t errlen);
void cmr_disc_tree_free(cmr_disc_tree_t *t);

/* Static names for reports ("found", "static" ...). */
const char *cmr_disc_status_name(int status);
const char *cmr_disc_via_name(int via);

/* The entry of o->exclude that excludes method owner.name(desc) (a method entry naming it,
 * or a class prefix of owner), or -1. */
long cmr_disc_excluded_by(const cmr_disc_opts_t *o, const char *owner, const char *name, const char *desc);
/* Whether an exclude entry names one method (it holds a '.'; class prefixes are internal
 * names, with '/'). */
bool cmr_disc_exclude_is_method(const char *entry);

/* true for the JDK's classes (java/, javax/, jdk/, sun/, com/sun/, ...). */
bool cmr_disc_is_jdk(const char *class_name);

#endif
