/*
 * tools/awl-check/harness.c - running conformance cases and reporting them
 * (see awl_check.h for what is checked, harness.h for what a case is).
 *
 * One case, start to end:
 *   1. every operand gets a storage of its own on the device, covering its
 *      view plus AC_GUARD bytes; inputs are random in every storage element
 *      (the gaps of a strided view too), outputs are poison (NaN bytes for
 *      floats, 0xA5 for int32), an in-place operand shares its input's;
 *   2. the call runs twice from the same uploaded bytes; the two results
 *      must be the same bits;
 *   3. every input's storage must be unchanged, and every byte of an
 *      output's storage that its view does not cover (before it, the gaps
 *      of a strided view, the guard after it);
 *   4. the reference computes the outputs in float64 from the values the
 *      inputs actually hold; each output element must be written (not
 *      poison), finite where the reference is, and within the tolerance:
 *      |got - want| <= tol (|want| + rms(want)), want rounded to the
 *      output's dtype first (so exact ops compare exactly), rms over the
 *      whole output (an absolute floor where values cross zero).
 */
#include "tools/awl-check/harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

/* ---- the run's state -------------------------------------------------------------- */

static uint64_t rng_state;
const awl_backend *ac_backend; /* the backend under test, and its device */
int ac_device;

static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ac_uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

/* ---- elements ------------------------------------------------------------------------ */

static size_t esize(awl_dtype dt) { return awl_dtype_size(dt); }

static double load(awl_dtype dt, const unsigned char *p, int64_t i)
{
    return awl_dtype_load(dt, p + i * (int64_t)esize(dt));
}

static void store(awl_dtype dt, unsigned char *p, int64_t i, double x)
{
    unsigned char *e = p + i * (int64_t)esize(dt);
    switch (dt) {
    case AWL_F32: {
        float f = (float)x;
        memcpy(e, &f, 4);
        break;
    }
    case AWL_F64: memcpy(e, &x, 8); break;
    case AWL_I32: {
        int32_t v = x != x               ? 0
                    : x >= 2147483647.0  ? INT32_MAX
                    : x <= -2147483648.0 ? INT32_MIN
                                         : (int32_t)x;
        memcpy(e, &v, 4);
        break;
    }
    default: {
        awl_bf16 h = awl_float_to_bf16((float)x);
        memcpy(e, &h, 2);
    }
    }
}

double ac_round(awl_dtype dt, double x)
{
    unsigned char b[8];
    store(dt, b, 0, x);
    return load(dt, b, 0);
}

static unsigned char poison_byte(awl_dtype dt) { return dt == AWL_I32 ? 0xA5 : 0xFF; }

/* ---- shapes and views ------------------------------------------------------------------ */

int64_t ac_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

void ac_unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? i % shape[d] : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
}

int64_t ac_ravel(const int64_t *idx, int ndim, const int64_t *shape)
{
    int64_t i = 0;
    for (int d = 0; d < ndim; d++) i = i * shape[d] + idx[d];
    return i;
}

/* Storage element of the view's row-major element i. */
static int64_t element_at(const ac_operand *o, int64_t i)
{
    int64_t off = o->offset;
    for (int d = o->ndim - 1; d >= 0; d--) {
        off += (i % o->shape[d]) * o->strides[d];
        i /= o->shape[d];
    }
    return off;
}

/* Storage elements the view spans (0 for an empty view). */
static int64_t span_of(const ac_operand *o)
{
    if (ac_numel(o->ndim, o->shape) == 0) return o->offset;
    int64_t last = o->offset;
    for (int d = 0; d < o->ndim; d++) last += (o->shape[d] - 1) * o->strides[d];
    return last + 1;
}

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    return awl_format_shape(ndim, shape, buf, size);
}

/* ---- building operands and cases ------------------------------------------------------- */

ac_operand ac_operand_new(const char *name, ac_role role, awl_dtype dtype, int ndim,
                          const int64_t *shape, ac_layout layout)
{
    ac_operand o;
    memset(&o, 0, sizeof o);
    o.name = name;
    o.role = role;
    o.dtype = dtype;
    o.ndim = ndim;
    o.alias = -1;
    o.domain = AWL_DOMAIN_REAL;
    memcpy(o.shape, shape, (size_t)ndim * sizeof *shape);
    int order[AWL_MAX_DIMS]; /* memory order, outermost first */
    for (int d = 0; d < ndim; d++) order[d] = d;
    if (layout == AC_TRANSPOSED && ndim >= 2) {
        order[ndim - 2] = ndim - 1;
        order[ndim - 1] = ndim - 2;
    } else if (layout == AC_REVERSED) {
        for (int d = 0; d < ndim; d++) order[d] = ndim - 1 - d;
    }
    int64_t s = layout == AC_SLICED ? 2 : 1;
    for (int k = ndim - 1; k >= 0; k--) {
        int d = order[k];
        o.strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
        if (layout == AC_SLICED && k == ndim - 1) s += 1; /* room for the step */
    }
    if (layout == AC_SLICED) o.offset = 3;
    if (layout == AC_OFFSET) o.offset = 5;
    if (layout == AC_BCAST0 && ndim >= 1) o.strides[0] = 0;
    if (layout == AC_BCAST1 && ndim >= 2) o.strides[1] = 0;
    if (layout == AC_BCAST_ALL)
        for (int d = 0; d < ndim; d++) o.strides[d] = 0;
    return o;
}

ac_operand ac_ints(ac_operand o, double lo, double hi)
{
    o.integer = true;
    o.lo = lo;
    o.hi = hi;
    return o;
}

ac_operand ac_domain(ac_operand o, awl_op_domain d)
{
    o.domain = d;
    return o;
}

ac_case ac_case_new(awl_kernel kernel, const char *name, awl_dtype dtype, const char *layout,
                    ac_call_fn call, ac_ref_fn reference)
{
    ac_case c;
    memset(&c, 0, sizeof c);
    c.kernel = kernel;
    snprintf(c.name, sizeof c.name, "%s",
             name && name[0] ? name : awl_kernel_get_info(kernel)->name);
    snprintf(c.layout, sizeof c.layout, "%s", layout);
    c.dtype = dtype;
    c.call = call;
    c.reference = reference;
    return c;
}

void ac_add(ac_case *c, ac_operand o)
{
    if (c->n < AC_MAX_OPERANDS) c->op[c->n++] = o;
}

/* Whether --op selects the case: its full name ("unary.exp"), its family
 * (the part before the dot: "unary"), its kernel ("matmul"), or the start
 * of a kernel's name up to an underscore when no kernel has that name
 * ("attention", "index", "softmax"). */
static bool op_selected(const char *filter, const ac_case *c)
{
    if (!filter || !filter[0]) return true;
    size_t n = strlen(filter);
    const char *kernel = awl_kernel_get_info(c->kernel)->name;
    const char *dot = strchr(c->name, '.');
    size_t family = dot ? (size_t)(dot - c->name) : strlen(c->name);
    if (strcmp(filter, c->name) == 0 || strcmp(filter, kernel) == 0 ||
        (family == n && strncmp(filter, c->name, n) == 0))
        return true;
    for (int k = 0; k < AWL_KERNEL_COUNT; k++)
        if (strcmp(filter, awl_kernel_get_info((awl_kernel)k)->name) == 0) return false;
    return strncmp(filter, kernel, n) == 0 && kernel[n] == '_';
}

void ac_push(ac_list *l, const ac_case *c)
{
    const awl_check_options *o = l->filter;
    if (o && o->dtype >= 0 && (int)c->dtype != o->dtype) return;
    if (o && !op_selected(o->op, c)) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->cases = realloc(l->cases, (size_t)l->cap * sizeof *l->cases);
        if (!l->cases) {
            fprintf(stderr, "awl-check: out of memory listing cases\n");
            exit(AWL_CHECK_USAGE);
        }
    }
    l->cases[l->n++] = *c;
}

double ac_default_tol(awl_dtype dtype)
{
    switch (dtype) {
    case AWL_F32: return 1e-5;
    case AWL_F64: return 1e-12;
    case AWL_BF16: return 1e-2;
    default: return 0.0;
    }
}

/* ---- references through CPU tensors ------------------------------------------------- */

awl_tensor *ac_cpu_tensor(const ac_case *c, double *const *in, int k)
{
    return awl_from_data(in[k], c->op[k].ndim, c->op[k].shape, AWL_F64, "cpu");
}

int ac_values(awl_tensor *t, double *ref, int64_t n)
{
    if (!t || awl_numel(t) != n) return AWL_ERR_INVALID;
    awl_scope_begin();
    awl_tensor *d = awl_tensor_cast(t, AWL_F64);
    int rc = d ? awl_to_host(d, ref, (size_t)n * sizeof *ref) : AWL_ERR_INVALID;
    awl_scope_end();
    return rc;
}

/* ---- one case ---------------------------------------------------------------------------- */

typedef enum outcome { PASSED, FAILED, MISSING, UNSUPPORTED } outcome;

typedef struct result {
    outcome what;
    char detail[640];
} result;

static outcome report(result *r, outcome what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static outcome report(result *r, outcome what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
    r->what = what;
    return what;
}

/* An operand's buffers: host copies of its storage (initial, after each of
 * the two runs), its device storage, and its logical values. */
typedef struct buffer {
    int64_t elems; /* storage elements, guard excluded */
    size_t bytes;  /* with the guard */
    unsigned char *init, *back, *back2;
    void *dev;
    double *values; /* logical, initial */
    double *ref;    /* logical, expected (outputs) */
} buffer;

static double draw(const ac_operand *o)
{
    if (o->integer) {
        double v = floor(o->lo + (o->hi - o->lo + 1) * ac_uniform());
        return v > o->hi ? o->hi : v;
    }
    bool ints = o->dtype == AWL_I32;
    switch (o->domain) {
    case AWL_DOMAIN_POSITIVE: return ints ? 1 + floor(20 * ac_uniform()) : 0.1 + 1.9 * ac_uniform();
    case AWL_DOMAIN_STEPS:
        return ints ? floor(7 * ac_uniform()) - 3 : 0.5 * (floor(7 * ac_uniform()) - 3);
    default: {
        if (ints) return floor(41 * ac_uniform()) - 20;
        double m = 0.05 + 1.95 * ac_uniform(); /* never near 0: a 0 hides bugs */
        return ac_uniform() < 0.5 ? -m : m;
    }
    }
}

static void read_values(const ac_operand *o, const unsigned char *storage, double *values)
{
    int64_t n = ac_numel(o->ndim, o->shape);
    for (int64_t i = 0; i < n; i++) values[i] = load(o->dtype, storage, element_at(o, i));
}

/* Where the first logical element k of an output differs between the two
 * runs, or -1. */
static int64_t first_difference(const ac_operand *o, const buffer *b)
{
    size_t es = esize(o->dtype);
    for (int64_t e = 0; e < (int64_t)(b->bytes / es); e++)
        if (memcmp(b->back + e * (int64_t)es, b->back2 + e * (int64_t)es, es) != 0) return e;
    return -1;
}

/* Checks the bytes of an output's storage that its view does not cover.
 * covered[e] marks the view's storage elements. */
static bool outside_untouched(const ac_operand *o, const buffer *b, const unsigned char *covered,
                              result *r)
{
    size_t es = esize(o->dtype);
    int64_t first = -1;
    for (int64_t e = 0; e < b->elems; e++) {
        if (covered[e]) {
            if (first < 0) first = e;
            continue;
        }
        if (memcmp(b->back + e * (int64_t)es, b->init + e * (int64_t)es, es) == 0) continue;
        if (first < 0 || e < o->offset)
            report(r, FAILED, "wrote %s's storage element %lld, before the view starts (at %lld)",
                   o->name, (long long)e, (long long)o->offset);
        else
            report(r, FAILED,
                   "wrote %s's storage element %lld, a gap between the strided view's elements",
                   o->name, (long long)e);
        return false;
    }
    size_t tail = (size_t)b->elems * es;
    for (size_t byte = b->bytes; byte-- > tail;) {
        if (b->back[byte] == b->init[byte]) continue;
        report(r, FAILED, "wrote past the end of %s by %zu bytes", o->name, byte - tail + 1);
        return false;
    }
    return true;
}

/* Compares an output's values with the reference; fills r on failure and
 * writes the largest relative error to *worst. */
static bool values_match(const ac_operand *o, const buffer *b, double tol, double *worst, result *r)
{
    int64_t n = ac_numel(o->ndim, o->shape);
    size_t es = esize(o->dtype);
    double rms = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(b->ref[i])) rms += b->ref[i] * b->ref[i];
    rms = n ? sqrt(rms / (double)n) : 0;
    unsigned char poison[8];
    memset(poison, poison_byte(o->dtype), sizeof poison);
    double max_abs = 0, max_rel = 0;
    int64_t bad = -1;
    double bad_got = 0, bad_want = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t e = element_at(o, i);
        double got = load(o->dtype, b->back, e), want = ac_round(o->dtype, b->ref[i]);
        int64_t idx[AWL_MAX_DIMS];
        char at[160];
        bool unwritten =
            o->alias < 0 && o->role == AC_OUT && memcmp(b->back + e * (int64_t)es, poison, es) == 0;
        if ((isnan(got) && isnan(want)) || (isinf(want) && got == want)) continue;
        if (unwritten || !isfinite(got) || !isfinite(want)) {
            ac_unravel(i, o->ndim, o->shape, idx);
            shape_str(o->ndim, idx, at, sizeof at);
            if (unwritten)
                report(r, FAILED, "%s%s was never written (it still holds the poison value)",
                       o->name, at);
            else
                report(r, FAILED, "%s%s is %g, expected %.9g", o->name, at, got, want);
            return false;
        }
        double err = fabs(got - want), rel = err / (fabs(want) + rms);
        if (err > max_abs) max_abs = err;
        if (rel > max_rel) max_rel = rel;
        if (bad < 0 && err > 0 && rel > tol) {
            bad = i;
            bad_got = got;
            bad_want = want;
        }
    }
    *worst = max_rel > *worst ? max_rel : *worst;
    if (bad < 0) return true;
    int64_t idx[AWL_MAX_DIMS];
    char at[160];
    ac_unravel(bad, o->ndim, o->shape, idx);
    shape_str(o->ndim, idx, at, sizeof at);
    report(r, FAILED,
           "%s: max abs err %.3g, max rel err %.3g > tol %.3g; first at %s%s: got %.9g, want %.9g",
           o->name, max_abs, max_rel, tol, o->name, at, bad_got, bad_want);
    return false;
}

static void free_buffers(const ac_case *c, buffer *b)
{
    for (int k = 0; k < c->n; k++) {
        if (c->op[k].alias < 0) {
            if (b[k].dev) ac_backend->free(ac_device, b[k].dev, b[k].bytes);
            free(b[k].init);
            free(b[k].back);
            free(b[k].back2);
        }
        free(b[k].values);
        free(b[k].ref);
    }
}

/* Uploads every storage's initial bytes, runs the call, and downloads into
 * back (second = false) or back2. */
static int run_once(const ac_case *c, buffer *b, bool second, bool strict, result *r)
{
    awl_view views[AC_MAX_OPERANDS];
    awl_view *vp[AC_MAX_OPERANDS];
    for (int k = 0; k < c->n; k++) {
        const ac_operand *o = &c->op[k];
        buffer *own = &b[o->alias >= 0 ? o->alias : k];
        if (o->alias < 0 &&
            ac_backend->copy_from_host(ac_device, own->dev, own->init, own->bytes) < 0)
            return report(r, FAILED, "copy_from_host failed: %s", awl_last_error());
        awl_view *v = &views[k];
        memset(v, 0, sizeof *v);
        v->data = own->dev;
        v->offset = o->offset;
        v->ndim = o->ndim;
        v->dtype = o->dtype;
        memcpy(v->shape, o->shape, sizeof v->shape);
        memcpy(v->strides, o->strides, sizeof v->strides);
        vp[k] = v;
    }
    awl_clear_error();
    int status = c->call(ac_backend, vp, &c->args);
    if (status == AWL_ERR_NOT_IMPLEMENTED)
        return report(r, MISSING, "%s", awl_last_error()[0] ? awl_last_error() : "not implemented");
    if (status == AWL_ERR_UNSUPPORTED) {
        if (awl_kernel_required(c->kernel, c->args.op, c->dtype))
            return report(r, FAILED,
                          "returned AWL_ERR_UNSUPPORTED, but every backend must compute this");
        if (strict)
            return report(r, FAILED, "declined a layout its contract covers (AWL_ERR_UNSUPPORTED)");
        return report(r, UNSUPPORTED, "declined this layout (AWL_ERR_UNSUPPORTED)");
    }
    if (status != AWL_OK)
        return report(r, FAILED, "returned %d: %s", status,
                      awl_last_error()[0] ? awl_last_error() : "(no message recorded)");
    if (ac_backend->synchronize(ac_device) < 0)
        return report(r, FAILED, "synchronize failed: %s", awl_last_error());
    for (int k = 0; k < c->n; k++) {
        if (c->op[k].alias >= 0) continue;
        if (ac_backend->copy_to_host(ac_device, second ? b[k].back2 : b[k].back, b[k].dev,
                                     b[k].bytes) < 0)
            return report(r, FAILED, "copy_to_host failed: %s", awl_last_error());
    }
    return PASSED;
}

static outcome run_case(const ac_case *c, double tol_scale, bool strict, double *worst, result *r)
{
    buffer b[AC_MAX_OPERANDS];
    memset(b, 0, sizeof b);
    r->detail[0] = '\0';
    r->what = PASSED;
    *worst = 0;
    /* 1. storages, contents and logical values */
    for (int k = 0; k < c->n; k++) {
        const ac_operand *o = &c->op[k];
        int64_t n = ac_numel(o->ndim, o->shape);
        b[k].values = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        b[k].ref = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        if (o->alias >= 0) continue;
        b[k].elems = span_of(o);
        b[k].bytes = (size_t)b[k].elems * esize(o->dtype) + AC_GUARD;
        b[k].init = malloc(b[k].bytes);
        b[k].back = malloc(b[k].bytes);
        b[k].back2 = malloc(b[k].bytes);
        b[k].dev = ac_backend->alloc(ac_device, b[k].bytes);
        if (!b[k].init || !b[k].back || !b[k].back2 || !b[k].dev) {
            report(r, FAILED, "cannot allocate %zu bytes for %s: %s", b[k].bytes, o->name,
                   awl_last_error());
            free_buffers(c, b);
            return r->what;
        }
        if (o->role == AC_OUT) {
            memset(b[k].init, poison_byte(o->dtype), b[k].bytes);
        } else {
            for (int64_t e = 0; e < b[k].elems; e++) store(o->dtype, b[k].init, e, draw(o));
            memset(b[k].init + b[k].elems * (int64_t)esize(o->dtype), 0x5A, AC_GUARD);
        }
    }
    for (int k = 0; k < c->n; k++) {
        const ac_operand *o = &c->op[k];
        int src = o->alias >= 0 ? o->alias : k;
        if (o->role != AC_OUT || o->alias >= 0) read_values(o, b[src].init, b[k].values);
    }
    if (c->init) {
        double *in[AC_MAX_OPERANDS];
        for (int k = 0; k < c->n; k++) in[k] = b[k].values;
        c->init(c, in);
        for (int k = 0; k < c->n; k++) { /* write them back, then read what is held */
            const ac_operand *o = &c->op[k];
            if (o->role == AC_OUT || o->alias >= 0) continue;
            int64_t n = ac_numel(o->ndim, o->shape);
            for (int64_t i = 0; i < n; i++) store(o->dtype, b[k].init, element_at(o, i), in[k][i]);
            read_values(o, b[k].init, b[k].values);
        }
    }
    /* 2. two runs */
    if (run_once(c, b, false, strict, r) != PASSED || run_once(c, b, true, strict, r) != PASSED) {
        free_buffers(c, b);
        return r->what;
    }
    /* 3. inputs unchanged, nothing written outside the outputs' views, and
     * the same bits twice */
    for (int k = 0; k < c->n && r->what == PASSED; k++) {
        const ac_operand *o = &c->op[k];
        if (o->alias >= 0) continue;
        bool written = o->role != AC_IN;
        for (int j = 0; j < c->n; j++) written |= c->op[j].alias == k;
        if (!written) {
            if (memcmp(b[k].back, b[k].init, b[k].bytes) != 0) {
                size_t es = esize(o->dtype), byte = 0;
                while (b[k].back[byte] == b[k].init[byte]) byte++;
                report(r, FAILED, "changed its input %s (storage element %zu)", o->name, byte / es);
            }
            continue;
        }
        int64_t d = first_difference(o, &b[k]);
        if (d >= 0) {
            report(r, FAILED,
                   "two runs from the same inputs differ (%s's storage element %lld): "
                   "not deterministic, or it reads memory it did not write",
                   o->name, (long long)d);
            break;
        }
        unsigned char *covered = calloc((size_t)(b[k].elems > 0 ? b[k].elems : 1), 1);
        int64_t n = ac_numel(o->ndim, o->shape);
        for (int64_t i = 0; i < n; i++) covered[element_at(o, i)] = 1;
        outside_untouched(o, &b[k], covered, r);
        free(covered);
    }
    /* 4. values */
    if (r->what == PASSED) {
        double *in[AC_MAX_OPERANDS], *ref[AC_MAX_OPERANDS];
        for (int k = 0; k < c->n; k++) {
            bool has_input = c->op[k].role != AC_OUT || c->op[k].alias >= 0;
            in[k] = has_input ? b[k].values : NULL;
            ref[k] = b[k].ref;
        }
        awl_scope_begin();
        bool fused = awl_set_fused_kernels(false); /* references compose */
        int rc = c->reference(c, in, ref);
        awl_set_fused_kernels(fused);
        awl_scope_end();
        if (rc < 0) report(r, FAILED, "the reference failed: %s", awl_last_error());
        for (int k = 0; k < c->n && r->what == PASSED; k++) {
            const ac_operand *o = &c->op[k];
            if (o->role == AC_IN) continue;
            const buffer *own = &b[o->alias >= 0 ? o->alias : k];
            buffer view = *own;
            view.ref = b[k].ref;
            /* each output at its own tolerance, the case's, or its dtype's */
            double t = o->dtype == AWL_I32 ? 0
                       : o->tol > 0        ? o->tol * tol_scale
                       : c->tol > 0        ? c->tol * tol_scale
                                           : ac_default_tol(o->dtype) * tol_scale;
            values_match(o, &view, t, worst, r);
        }
    }
    free_buffers(c, b);
    return r->what;
}

/* ---- reporting ------------------------------------------------------------------------- */

#define TALLY_KERNELS 6

/* Counts, and for --progress the first problem (FAIL or MISSING) of each
 * kernel that had one. */
typedef struct tally {
    awl_check_counts counts;
    int n_problems;
    awl_kernel problem_kernel[TALLY_KERNELS];
    char problem[TALLY_KERNELS][1024];
} tally;

static const char *outcome_name(outcome o)
{
    static const char *const names[] = {"PASS", "FAIL", "MISSING", "UNSUPPORTED"};
    return names[o];
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void ac_print(const awl_check_options *o, const char *result, const char *name, const char *dtype,
              const char *layout, const char *detail)
{
    FILE *f = o->out ? o->out : stdout;
    if (o->progress || (o->quiet && strcmp(result, "PASS") == 0)) return;
    if (o->json) {
        fprintf(f, "{\"result\":\"%s\",\"op\":", result);
        json_string(f, name);
        fprintf(f, ",\"dtype\":\"%s\",\"layout\":", dtype);
        json_string(f, layout);
        fprintf(f, ",\"detail\":");
        json_string(f, detail);
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "%-11s %-24s %-8s %-34s %s\n", result, name, dtype, layout, detail);
}

static void print_line(const awl_check_options *o, outcome what, const char *name,
                       const char *dtype, const char *layout, const char *detail)
{
    ac_print(o, outcome_name(what), name, dtype, layout, detail);
}

static void count(tally *t, outcome what, int n, awl_kernel kernel, const char *line)
{
    switch (what) {
    case PASSED: t->counts.passed += n; break;
    case FAILED: t->counts.failed += n; break;
    case MISSING: t->counts.missing += n; break;
    default: t->counts.unsupported += n; break;
    }
    if (what == PASSED || what == UNSUPPORTED) return;
    for (int i = 0; i < t->n_problems; i++)
        if (t->problem_kernel[i] == kernel) return;
    if (t->n_problems == TALLY_KERNELS) return;
    t->problem_kernel[t->n_problems] = kernel;
    snprintf(t->problem[t->n_problems++], sizeof t->problem[0], "%s", line);
}

int awl_check_status(const awl_check_counts *c)
{
    return c->failed ? AWL_CHECK_FAILED : c->missing ? AWL_CHECK_MISSING : AWL_CHECK_OK;
}

/* ---- the whole run ------------------------------------------------------------------------ */

/* Opens the device of the options: ac_backend and ac_device. */
int ac_open_device(const awl_check_options *o)
{
    const char *name = o->device ? o->device : "cpu";
    FILE *f = o->out ? o->out : stdout;
    char backend[32];
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    snprintf(backend, sizeof backend, "%.*s", (int)len, name);
    ac_backend = awl_backend_find(backend);
    ac_device = colon ? atoi(colon + 1) : 0;
    if (!ac_backend) {
        fprintf(f, "awl-check: no backend '%s' in this build (it has:", backend);
        for (int i = 0; i < awl_backend_count(); i++) fprintf(f, " %s", awl_backend_at(i)->name);
        fprintf(f, ")\n");
        return AWL_CHECK_USAGE;
    }
    if (ac_device < 0 || ac_device >= ac_backend->device_count()) {
        fprintf(f, "awl-check: device %s is not present here (%d %s device%s): skipped\n", name,
                ac_backend->device_count(), ac_backend->name,
                ac_backend->device_count() == 1 ? "" : "s");
        return AWL_CHECK_NO_DEVICE;
    }
    return AWL_OK;
}

/* Every case the options select, grouped by kernel in the kernels' order
 * (each group in the order its generator listed it). */
static ac_list list_cases(const awl_check_options *o)
{
    ac_list l = {NULL, 0, 0, o};
    rng_state = o->seed ? o->seed : 1;
    ac_primitive_cases(&l);
    ac_fused_cases(&l);
    ac_case *sorted = malloc((size_t)(l.n > 0 ? l.n : 1) * sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, "awl-check: out of memory listing cases\n");
        exit(AWL_CHECK_USAGE);
    }
    int n = 0;
    for (int k = 0; k < AWL_KERNEL_COUNT; k++)
        for (int i = 0; i < l.n; i++)
            if ((int)l.cases[i].kernel == k) sorted[n++] = l.cases[i];
    free(l.cases);
    l.cases = sorted;
    return l;
}

/* Whether kernel is present and declared for (op, dtype); else the
 * outcome and why. */
static outcome capability(const ac_case *c, const char **why)
{
    bool required = awl_kernel_required(c->kernel, c->args.op, c->dtype);
    if (!awl_backend_has(ac_backend, c->kernel)) {
        *why = required ? "not implemented (its entry in the table is NULL)"
                        : "not provided (the framework composes it from primitives)";
        return required ? MISSING : UNSUPPORTED;
    }
    if (!awl_backend_supports(ac_backend, c->kernel, c->args.op, c->dtype)) {
        *why = required ? "declared unsupported, but every backend must compute it"
                        : "declared unsupported (the backend's supports)";
        return required ? FAILED : UNSUPPORTED;
    }
    return PASSED;
}

typedef struct milestone_tally {
    tally t;
    int cases;
} milestone_tally;

static void print_progress(const awl_check_options *o, const milestone_tally *m, int nm)
{
    FILE *f = o->out ? o->out : stdout;
    int next = 0;
    for (int i = 1; i <= nm + 1; i++) {
        int k = i <= nm ? i : 0; /* the fused kernels last */
        const awl_check_counts *c = &m[k].t.counts;
        if (m[k].cases == 0) continue;
        int total = c->passed + c->failed + c->missing;
        const char *state = c->failed             ? "fix "
                            : c->missing == total ? "todo"
                            : c->missing          ? "part"
                                                  : "done";
        if (k && !next && (c->failed || c->missing)) next = k;
        char title[64];
        if (k)
            snprintf(title, sizeof title, "milestone %d  %s", k, awl_milestone_title(k));
        else
            snprintf(title, sizeof title, "fused kernels (optional)");
        fprintf(f, "%-50s [%s] %4d passed, %d failed, %d missing", title, k ? state : " -- ",
                c->passed, c->failed, c->missing);
        if (c->unsupported)
            fprintf(f, ", %d unsupported%s", c->unsupported, k ? "" : " (composed instead)");
        fprintf(f, "\n");
        for (int p = 0; p < m[k].t.n_problems; p++) fprintf(f, "    %s\n", m[k].t.problem[p]);
    }
    if (next)
        fprintf(f, "next: milestone %d, %s (docs/backend-guide.md)\n", next,
                awl_milestone_title(next));
}

/* Prints and counts a line for n checks. */
static void emit(const awl_check_options *o, tally *mt, tally *all, outcome what, int n,
                 awl_kernel kernel, const char *name, const char *dtype, const char *layout,
                 const char *detail)
{
    char line[1600], where[300] = "";
    print_line(o, what, name, dtype, layout, detail);
    if (strcmp(dtype, "-") != 0) snprintf(where, sizeof where, " %s %s", dtype, layout);
    snprintf(line, sizeof line, "%s %s%s: %s", outcome_name(what), name, where, detail);
    count(mt, what, n, kernel, line);
    count(all, what, n, kernel, line);
}

/* The cases of one kernel, cases[0..n). A missing kernel, and a dtype it
 * declares it does not compute, are reported once, with the number of
 * their checks. */
static void run_kernel(const awl_check_options *o, const ac_case *cases, int n, milestone_tally *m,
                       tally *all, double tol_scale)
{
    awl_kernel kernel = cases[0].kernel;
    const char *kname = awl_kernel_get_info(kernel)->name;
    milestone_tally *ms = &m[awl_kernel_get_info(kernel)->milestone];
    ms->cases += n;
    char detail[1024];
    if (!awl_backend_has(ac_backend, kernel)) {
        bool required = awl_kernel_get_info(kernel)->required != 0;
        snprintf(detail, sizeof detail, "%d check%s: %s", n, n == 1 ? "" : "s",
                 required ? "not implemented (its entry in the table is NULL)"
                          : "not provided (the framework composes it from primitives)");
        emit(o, &ms->t, all, required ? MISSING : UNSUPPORTED, n, kernel, kname, "-", "all layouts",
             detail);
        return;
    }
    int declined[AWL_DTYPE_COUNT] = {0}, refused[AWL_DTYPE_COUNT] = {0}, missing = 0;
    char missing_why[640] = "";
    for (int i = 0; i < n; i++) {
        const ac_case *c = &cases[i];
        const char *why = NULL;
        outcome cap = capability(c, &why);
        if (cap == UNSUPPORTED) {
            declined[c->dtype]++;
            continue;
        }
        if (cap == FAILED) {
            refused[c->dtype]++;
            continue;
        }
        result r;
        double worst = 0;
        outcome what = run_case(c, tol_scale, o->strict, &worst, &r);
        if (what == MISSING) {
            if (!missing++) snprintf(missing_why, sizeof missing_why, "%s", r.detail);
            continue;
        }
        char shape[160], layout[224];
        shape_str(c->op[0].ndim, c->op[0].shape, shape, sizeof shape);
        snprintf(layout, sizeof layout, "%s %s", c->layout, shape);
        if (what == PASSED)
            snprintf(detail, sizeof detail, "max rel err %.2g", worst);
        else
            snprintf(detail, sizeof detail, "%s", r.detail);
        emit(o, &ms->t, all, what, 1, kernel, c->name, awl_dtype_name(c->dtype), layout, detail);
    }
    if (missing) {
        snprintf(detail, sizeof detail, "%d check%s: %s", missing, missing == 1 ? "" : "s",
                 missing_why);
        emit(o, &ms->t, all, MISSING, missing, kernel, kname, "-", "all layouts", detail);
    }
    for (int d = 0; d < AWL_DTYPE_COUNT; d++) {
        if (refused[d]) {
            snprintf(detail, sizeof detail,
                     "%d checks: declared unsupported, but every backend must compute it",
                     refused[d]);
            emit(o, &ms->t, all, FAILED, refused[d], kernel, kname, awl_dtype_name((awl_dtype)d),
                 "all layouts", detail);
        }
        if (declined[d]) {
            snprintf(detail, sizeof detail,
                     "%d checks: declared unsupported (the backend's "
                     "supports)",
                     declined[d]);
            emit(o, &ms->t, all, UNSUPPORTED, declined[d], kernel, kname,
                 awl_dtype_name((awl_dtype)d), "all layouts", detail);
        }
    }
}

int awl_check_run(const awl_check_options *o, awl_check_counts *counts)
{
    int status = ac_open_device(o);
    if (status != AWL_OK) return status;
    FILE *f = o->out ? o->out : stdout;
    ac_list l = list_cases(o);
    milestone_tally m[AWL_MILESTONE_COUNT + 1];
    memset(m, 0, sizeof m);
    tally all;
    memset(&all, 0, sizeof all);
    double tol_scale = o->tol_scale > 0 ? o->tol_scale : 1.0;
    if (!o->json)
        fprintf(f, "awl-check: device %s, %d checks, seed %llu\n", o->device ? o->device : "cpu",
                l.n, (unsigned long long)(o->seed ? o->seed : 1));
    for (int i = 0; i < l.n;) {
        int j = i;
        while (j < l.n && l.cases[j].kernel == l.cases[i].kernel) j++;
        run_kernel(o, l.cases + i, j - i, m, &all, tol_scale);
        i = j;
    }
    if (o->progress) print_progress(o, m, AWL_MILESTONE_COUNT);
    const awl_check_counts *c = &all.counts;
    if (o->json)
        fprintf(
            f, "{\"summary\":true,\"passed\":%d,\"failed\":%d,\"missing\":%d,\"unsupported\":%d}\n",
            c->passed, c->failed, c->missing, c->unsupported);
    else
        fprintf(f, "%d passed, %d failed, %d missing (%d unsupported)\n", c->passed, c->failed,
                c->missing, c->unsupported);
    if (counts) {
        counts->passed += c->passed;
        counts->failed += c->failed;
        counts->missing += c->missing;
        counts->unsupported += c->unsupported;
    }
    free(l.cases);
    return awl_check_status(c);
}

int awl_check_list(const awl_check_options *o)
{
    int status = ac_open_device(o);
    if (status != AWL_OK && status != AWL_CHECK_NO_DEVICE) return status;
    FILE *f = o->out ? o->out : stdout;
    fprintf(f, "kernels of %s (milestone, present, declared dtypes):\n", ac_backend->name);
    for (int k = 0; k < AWL_KERNEL_COUNT; k++) {
        const awl_kernel_info *info = awl_kernel_get_info((awl_kernel)k);
        char milestone[8] = "-";
        if (info->milestone) snprintf(milestone, sizeof milestone, "%d", info->milestone);
        fprintf(f, "  %-24s %-2s %-8s", info->name, milestone,
                awl_backend_has(ac_backend, (awl_kernel)k) ? "present" : "absent");
        for (int d = 0; d < AWL_DTYPE_COUNT; d++)
            if (awl_backend_supports(ac_backend, (awl_kernel)k, 0, (awl_dtype)d) ||
                ((k == AWL_KERNEL_UNARY || k == AWL_KERNEL_BINARY || k == AWL_KERNEL_REDUCE) &&
                 awl_backend_supports(ac_backend, (awl_kernel)k, 1, (awl_dtype)d)))
                fprintf(f, " %s", awl_dtype_name((awl_dtype)d));
        fprintf(f, "\n");
    }
    ac_list l = list_cases(o);
    fprintf(f, "%d checks:\n", l.n);
    for (int i = 0; i < l.n; i++) {
        const ac_case *c = &l.cases[i];
        char shape[160];
        shape_str(c->op[0].ndim, c->op[0].shape, shape, sizeof shape);
        fprintf(f, "  %-24s %-8s %s %s\n", c->name, awl_dtype_name(c->dtype), c->layout, shape);
    }
    free(l.cases);
    return AWL_CHECK_OK;
}
