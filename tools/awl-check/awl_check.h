/*
 * tools/awl-check/awl_check.h - the backend conformance runner, as a
 * library: the `awl-check` program (main.c) and the conformance suites
 * (tests/test_backend.c, tests/test_cuda.c) call it.
 *
 * It checks a backend op by op, straight through its table (no tensor
 * layer in between), against a float64 reference computed on the host:
 * every primitive over a grid of dtypes and layouts (contiguous,
 * transposed, broadcast through zero strides, offset slices, zero-size,
 * one element, odd sizes, and sizes large enough for a kernel's parallel
 * paths), every fused kernel against its composed version. Each case
 * prints one line:
 *
 *   PASS         the outputs match within the op's tolerance
 *   FAIL         why: an error status, a write outside the output view
 *                (guard bytes after it, gaps inside a strided view,
 *                elements before it), an input changed, an output element
 *                never written, NaN or Inf where the reference is finite,
 *                two runs that differ, or the largest errors with the first
 *                bad element (its multi-index, got, expected)
 *   MISSING      the entry is NULL or answers AWL_ERR_NOT_IMPLEMENTED (a
 *                required primitive, or the student backend's stubs); one
 *                line per kernel, with the count of its cases
 *   UNSUPPORTED  an optional combination the backend declares it does not
 *                compute (its `supports`, a NULL fused kernel), one line
 *                per kernel and dtype
 *
 * and a summary "N passed, N failed, N missing (N unsupported)".
 * docs/backend-guide.md shows what each kind of mistake looks like.
 */
#ifndef AWL_TOOLS_AWL_CHECK_H
#define AWL_TOOLS_AWL_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"

typedef struct awl_check_options {
    const char *device; /* "cpu", "cuda:1", "student"; NULL: "cpu"      */
    /* Only the checks whose name is op ("unary.exp"), or whose kernel is
     * op ("unary", "attention" for both of its kernels); NULL: all. */
    const char *op;
    int dtype;        /* an awl_dtype, or -1 for all                   */
    uint64_t seed;    /* of the inputs; the same seed, the same inputs */
    double tol_scale; /* multiplies every tolerance (0: 1)             */
    bool quiet;       /* print only lines that are not PASS            */
    /* A kernel that declines (AWL_ERR_UNSUPPORTED) a layout of its contract
     * in a dtype it declares is a FAIL, not UNSUPPORTED (the suites of the
     * built-in backends, which must run every case they declare). */
    bool strict;
    bool progress; /* one line per milestone instead of per case    */
    bool json;     /* lines as JSON objects                         */
    FILE *out;     /* NULL: stdout                                  */
} awl_check_options;

typedef struct awl_check_counts {
    int passed, failed, missing, unsupported;
} awl_check_counts;

/* Exit statuses of awl-check (and what the run functions return). */
enum {
    AWL_CHECK_OK = 0,         /* everything that ran passed, nothing missing */
    AWL_CHECK_FAILED = 1,     /* at least one FAIL                           */
    AWL_CHECK_MISSING = 2,    /* no FAIL, but required primitives missing    */
    AWL_CHECK_USAGE = 3,      /* bad arguments, unknown device               */
    AWL_CHECK_NO_DEVICE = 77, /* the backend is built but has no device here */
};

/* The conformance checks. Adds to *counts (may be NULL) and returns one of
 * the statuses above. */
int awl_check_run(const awl_check_options *o, awl_check_counts *counts);

/* --perf: GB/s or GFLOP/s of each primitive on the device and on the CPU
 * backend, measured alternately in this process, and their ratio. */
int awl_check_perf(const awl_check_options *o);

/* --grad: the float64 gradient checks of every differentiable op, on the
 * device, through the tensor layer (so composed fallbacks run where the
 * backend lacks a fused kernel). */
int awl_check_grad(const awl_check_options *o, awl_check_counts *counts);

/* --list: the checks that would run, one per line, and the device's
 * kernels (present, declared dtypes). */
int awl_check_list(const awl_check_options *o);

/* The status a run's counts amount to. */
int awl_check_status(const awl_check_counts *c);

#endif
