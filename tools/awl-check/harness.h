/*
 * tools/awl-check/harness.h - how a conformance case is described, for the
 * files that list cases (primitives.c, fused.c) and the one that runs them
 * (harness.c).
 *
 * A case is one call of one kernel: its operands (each a dtype, a shape, a
 * strided layout over a storage of its own, a role and what its inputs
 * hold), the call itself, and a reference that computes the expected
 * outputs in float64 from the inputs' values. The runner builds each
 * storage with guard bytes after it, fills inputs (every storage element,
 * so the gaps of a strided input hold values too) and poisons outputs,
 * runs the call twice, and checks everything awl_check.h lists.
 *
 * Values travel as "logical" arrays: the view's elements in row-major
 * order, as doubles. The reference reads them and writes the outputs'
 * logical arrays; it never sees strides.
 */
#ifndef AWL_TOOLS_AWL_CHECK_HARNESS_H
#define AWL_TOOLS_AWL_CHECK_HARNESS_H

#include "tensor/tensor.h"
#include "tools/awl-check/awl_check.h"

#define AC_MAX_OPERANDS 16
/* Bytes after every storage that no view covers: a write there is out of
 * bounds. */
#define AC_GUARD 64

typedef enum ac_role { AC_IN, AC_OUT, AC_INOUT } ac_role;

typedef struct ac_operand {
    const char *name; /* "out", "a", "idx": messages name operands so */
    ac_role role;
    awl_dtype dtype;
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[AWL_MAX_DIMS];
    int64_t offset;
    /* What an input holds: values of `domain`, or integers in [lo, hi]. */
    awl_op_domain domain;
    bool integer;
    double lo, hi;
    /* >= 0: this operand is the same view of the same storage as operand
     * `alias` (an in-place update); its initial values are that operand's. */
    int alias;
    /* An output's relative tolerance where it differs from the case's (a
     * bfloat16 copy of a float32 output); 0: the case's. */
    double tol;
} ac_operand;

/* Everything a call or a reference needs beyond the operands. */
typedef struct ac_args {
    int op;       /* unary, binary or reduce code                      */
    double alpha; /* unary scalar; fill value                          */
    int axis;     /* gather, scatter_add                               */
    bool flag;    /* matmul accumulate, softmax log, attention causal  */
    int kind;     /* random: awl_random_kind                           */
    uint64_t seed, offset;
    double a, b, eps, scale;
    int ignore_index;
    int count; /* adamw: parameters (4 operands each)               */
    float wd[4];
    awl_adamw_args adam;
    awl_dropout_args dropout; /* attention, dropout; p = 0: none */
    int extra; /* an optional operand's index (layernorm backward's dx_add); 0: none */
    int extra2; /* a second one (layernorm backward's dx_copy); 0: none */
} ac_args;

typedef struct ac_case ac_case;

/* The call under test: the views are the operands', in order. */
typedef int (*ac_call_fn)(const awl_backend *b, awl_view *const *v, const ac_args *a);
/* Writes ref[k] (row-major over operand k's shape) for every OUT and INOUT
 * operand, from in[k] (the values of every operand, an INOUT's initial
 * ones; an OUT's entry is NULL). Returns 0, or negative when it could not. */
typedef int (*ac_ref_fn)(const ac_case *c, double *const *in, double **ref);
/* Optional: changes inputs' values (in[k], as above) before the run, for
 * inputs that must be consistent with each other. */
typedef void (*ac_init_fn)(const ac_case *c, double **in);

struct ac_case {
    awl_kernel kernel;
    char name[40];   /* "unary.exp", "matmul", "softmax_forward.log" */
    char layout[56]; /* "transposed in", "sliced out", ...           */
    awl_dtype dtype;
    int n;
    ac_operand op[AC_MAX_OPERANDS];
    ac_args args;
    double tol; /* relative; 0: the dtype's default (ac_default_tol) */
    ac_call_fn call;
    ac_ref_fn reference;
    ac_init_fn init;
};

/* ---- building cases (harness.c) ------------------------------------------------- */

/* Contiguous row-major layouts, from the shape. */
typedef enum ac_layout {
    AC_CONTIG,     /* row-major                                          */
    AC_TRANSPOSED, /* the last two axes swapped in memory                */
    AC_REVERSED,   /* every axis reversed in memory (a full permute)     */
    AC_SLICED,     /* every second element along the last axis, offset 3 */
    AC_BCAST0,     /* axis 0 read with stride 0                          */
    AC_BCAST1,     /* axis 1 read with stride 0                          */
    AC_BCAST_ALL,  /* one stored element read everywhere                 */
    AC_OFFSET,     /* contiguous, starting 5 elements into its storage   */
} ac_layout;

ac_operand ac_operand_new(const char *name, ac_role role, awl_dtype dtype, int ndim,
                          const int64_t *shape, ac_layout layout);
/* An input of integers in [lo, hi] (indices, targets, conditions). */
ac_operand ac_ints(ac_operand o, double lo, double hi);
ac_operand ac_domain(ac_operand o, awl_op_domain d);

/* A new case of kernel; name "" means the kernel's. */
ac_case ac_case_new(awl_kernel kernel, const char *name, awl_dtype dtype, const char *layout,
                    ac_call_fn call, ac_ref_fn reference);
void ac_add(ac_case *c, ac_operand o);

/* The case list being built: generators append to it. */
typedef struct ac_list {
    ac_case *cases;
    int n, cap;
    const awl_check_options *filter;
} ac_list;

/* Appends c unless the options' --op or --dtype filter excludes it. */
void ac_push(ac_list *l, const ac_case *c);

/* The generators (primitives.c, fused.c). */
void ac_primitive_cases(ac_list *l);
void ac_fused_cases(ac_list *l);

/* ---- for references ---------------------------------------------------------------- */

int64_t ac_numel(int ndim, const int64_t *shape);
/* x as the dtype holds it (float32 and bfloat16 rounded, as a store rounds). */
double ac_round(awl_dtype dt, double x);
/* Row-major multi-index of element i; idx has room for AWL_MAX_DIMS. */
void ac_unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx);
int64_t ac_ravel(const int64_t *idx, int ndim, const int64_t *shape);
/* The default relative tolerance of a dtype. */
double ac_default_tol(awl_dtype dtype);
/* A float64 CPU tensor holding operand k's values (owned by the current
 * scope), for references composed from tensor ops. */
awl_tensor *ac_cpu_tensor(const ac_case *c, double *const *in, int k);
/* Copies a CPU tensor's values into ref (numel doubles); 0 or negative. */
int ac_values(awl_tensor *t, double *ref, int64_t n);

/* ---- the run (harness.c) ---------------------------------------------------------------- */

/* The backend under test and its device index, once ac_open_device has
 * found them (perf.c and grad.c use them too). */
extern const awl_backend *ac_backend;
extern int ac_device;
/* Finds the options' device: AWL_OK, AWL_CHECK_USAGE or
 * AWL_CHECK_NO_DEVICE (with a message). */
int ac_open_device(const awl_check_options *o);
/* One report line (or JSON object), as every mode prints them. */
void ac_print(const awl_check_options *o, const char *result, const char *name, const char *dtype,
              const char *layout, const char *detail);

/* Normalised uniform and normal draws from the run's seeded generator
 * (cases' init functions use it). */
double ac_uniform(void);

#endif
