/*
 * tests/helpers/gradcheck.h - numerical gradient checks for the op tests.
 *
 * awl_gradcheck compares the gradient autograd computes with central finite
 * differences, element by element, in float64:
 *
 *     static awl_tensor *f(awl_tensor *const *in, void *user) { return awl_mul(in[0], in[1]); }
 *     ...
 *     awl_scope_begin();
 *     awl_tensor *in[2] = {awl_gc_permuted(AWL_SHAPE(3, 4)), awl_gc_randn(AWL_SHAPE(4))};
 *     ck_assert(awl_gradcheck(f, NULL, 2, in, "mul"));
 *     awl_scope_end();
 *
 * The scalar being differentiated is L = sum(f(inputs) * u), with u a random
 * upstream gradient (so every output element is checked, not just their sum).
 * Inputs may be non-contiguous views, including broadcast (zero-stride) ones:
 * each storage element is perturbed once and compared with the sum of the
 * analytic gradients of the view elements that read it. awl_gradgradcheck
 * does the same for the first gradient itself (computed with create_graph),
 * which checks second-order gradients.
 *
 * Every tensor made here lives on the device named by the environment
 * variable AWL_TEST_DEVICE ("cpu" when unset), so the same tests run on a
 * GPU. On failure the checks print the op's name, the input, the element and
 * both values to stderr, and return false. Results of the awl_gc_* tensor
 * makers belong to the current scope.
 */
#ifndef AWL_TESTS_GRADCHECK_H
#define AWL_TESTS_GRADCHECK_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "autograd/autograd.h"

/* The function under test: builds one output from inputs[0..n) with
 * differentiable ops (owned by the current scope; NULL on failure). */
typedef awl_tensor *(*awl_gc_fn)(awl_tensor *const *inputs, void *user);

typedef struct awl_gc_options {
    double eps;  /* finite-difference step: 1e-6                         */
    double atol; /* |analytic - numeric| <= atol + rtol * |numeric|: 1e-5 */
    double rtol; /* 1e-6                                                  */
} awl_gc_options;

/* First-order check of every float64 input (marked requires_grad here). */
bool awl_gradcheck(awl_gc_fn fn, void *user, int n_inputs, awl_tensor *const *inputs,
                   const char *name);
/* Second-order check: the gradient of sum_i <dL/dx_i, v_i> (random v_i),
 * differentiated through create_graph, against finite differences of the
 * first gradient. */
bool awl_gradgradcheck(awl_gc_fn fn, void *user, int n_inputs, awl_tensor *const *inputs,
                       const char *name);
/* The same with explicit tolerances (NULL: the defaults above). */
bool awl_gradcheck_ex(awl_gc_fn fn, void *user, int n_inputs, awl_tensor *const *inputs,
                      const char *name, const awl_gc_options *options);
bool awl_gradgradcheck_ex(awl_gc_fn fn, void *user, int n_inputs, awl_tensor *const *inputs,
                          const char *name, const awl_gc_options *options);

/* ---- running a suite ------------------------------------------------------------------ */

/* Runs tests[0..n) as one Check suite (one test case of the same name, with
 * a timeout far above what they need) and returns main's exit status.
 * CK_FORK, CK_VERBOSITY and friends are honoured. */
int awl_gc_run_suite(const char *name, int n, const TTest *const *tests);
#define AWL_GC_RUN_SUITE(name, ...)                                                                \
    awl_gc_run_suite(name, (int)(sizeof((const TTest *[]){__VA_ARGS__}) / sizeof(const TTest *)),  \
                     (const TTest *[]){__VA_ARGS__})

/* ---- test bracketing ------------------------------------------------------------------ */

/* Starts a test: seeds the generator with `seed`, remembers the bytes in
 * use on the test device, and opens a scope. */
void awl_gc_begin(uint64_t seed);
/* Ends it: closes the scope and returns whether the bytes in use are back
 * where awl_gc_begin found them (prints the difference otherwise). */
bool awl_gc_end(void);

/* ---- test inputs on the test device ---------------------------------------------- */

/* The device awl_gc_set_device chose, else $AWL_TEST_DEVICE, else "cpu". */
const char *awl_gc_device(void);
/* Makes device (kept, not copied) the test device; NULL: back to the
 * environment's. awl-check --grad sets it. */
void awl_gc_set_device(const char *device);

/* Standard normal values of `shape` in `dtype`, contiguous. */
awl_tensor *awl_gc_randn_dtype(int ndim, const int64_t *shape, awl_dtype dtype);
/* float64 inputs of `shape`: contiguous; a transposed view (all axes
 * reversed, so strides run backwards; contiguous for ndim < 2); every second
 * element of a twice-as-long last axis; and a broadcast view whose axis
 * `dim` has stride 0 (one stored value repeated). */
awl_tensor *awl_gc_randn(int ndim, const int64_t *shape);
awl_tensor *awl_gc_permuted(int ndim, const int64_t *shape);
awl_tensor *awl_gc_sliced(int ndim, const int64_t *shape);
awl_tensor *awl_gc_expanded(int ndim, const int64_t *shape, int dim);
/* The same four layouts by number (0..3, with dim 0 for the broadcast one)
 * in any dtype: tests loop over them. */
enum { AWL_GC_LAYOUTS = 4 };
awl_tensor *awl_gc_layout(int layout, int ndim, const int64_t *shape, awl_dtype dtype);
const char *awl_gc_layout_name(int layout);

/* Replaces every stored value v of t's storage (so every view of it) by
 * |v| + 0.5, for ops defined only on positive numbers (log, sqrt, pow). */
void awl_gc_make_positive(awl_tensor *t);

/* A tensor of `shape` in `dtype` on the test device holding values
 * (row-major doubles, converted). */
awl_tensor *awl_gc_from_doubles(const double *values, int ndim, const int64_t *shape,
                                awl_dtype dtype);

/* ---- reading results --------------------------------------------------------------- */

/* t's elements, row-major, as doubles (malloc'd; the caller frees). NULL
 * for a NULL t. */
double *awl_gc_values(awl_tensor *t);
/* Whether got[i] and want[i] agree within atol + rtol * |want| for all i;
 * prints the first few differences, labelled with what, otherwise. */
bool awl_gc_allclose(const double *got, const double *want, int64_t n, double atol, double rtol,
                     const char *what);
/* Advances a row-major multi-index over shape; false after the last
 * element (the index is then all zeros again). */
bool awl_gc_next_index(int64_t *idx, int ndim, const int64_t *shape);
/* Whether t has exactly this shape. */
bool awl_gc_has_shape(const awl_tensor *t, int ndim, const int64_t *shape);

#endif
