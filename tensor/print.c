/*
 * tensor/print.c - PyTorch-style repr of a tensor.
 *
 *     tensor([[ 0.1000, -2.0000],
 *             [ 3.5000,  4.0000]], requires_grad=True)
 *
 * Values are fetched to the host as float64 once, a single number format is
 * chosen for the whole tensor (whole numbers "3.", fixed "0.1235", or
 * scientific "1.2346e+05" when magnitudes span too much), and every entry is
 * padded to one width so columns line up. Tensors over 1000 elements show
 * three entries at each end of every axis with "..." between.
 */
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SUMMARY_THRESHOLD 1000
#define EDGE_ITEMS 3

typedef struct out_buffer {
    char *buf;
    size_t size, len; /* len counts every byte wanted, even past size */
} out_buffer;

static void emit(out_buffer *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(out_buffer *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->size ? o->size - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

typedef enum number_style { STYLE_INT, STYLE_WHOLE, STYLE_FIXED, STYLE_SCI } number_style;

typedef struct printer {
    const awl_tensor *t;
    const double *values; /* row-major */
    number_style style;
    int width;
    bool summarize;
    int indent;
} printer;

static int format_value(const printer *p, double v, char *buf, size_t size)
{
    switch (p->style) {
    case STYLE_INT: return snprintf(buf, size, "%.0f", v);
    case STYLE_WHOLE:
        return isfinite(v) ? snprintf(buf, size, "%.0f.", v) : snprintf(buf, size, "%g", v);
    case STYLE_FIXED:
        return isfinite(v) ? snprintf(buf, size, "%.4f", v) : snprintf(buf, size, "%g", v);
    default: return isfinite(v) ? snprintf(buf, size, "%.4e", v) : snprintf(buf, size, "%g", v);
    }
}

static bool shown(const printer *p, int64_t i, int64_t n)
{
    return !p->summarize || n <= 2 * EDGE_ITEMS || i < EDGE_ITEMS || i >= n - EDGE_ITEMS;
}

static number_style choose_style(const awl_tensor *t, const double *v, int64_t n)
{
    if (t->dtype == AWL_I32) return STYLE_INT;
    bool whole = true;
    double lo = INFINITY, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        double a = fabs(v[i]);
        if (a != floor(a)) whole = false;
        if (a > 0 && a < lo) lo = a;
        if (a > hi) hi = a;
    }
    if (whole && hi < 1e8) return STYLE_WHOLE;
    if (hi >= 1e8 || (lo < 1e-4 && lo > 0) || (lo > 0 && hi / lo > 1e3 && hi >= 1e3))
        return STYLE_SCI;
    return STYLE_FIXED;
}

/* Emits the sub-tensor at axis `dim` starting at element `base`. */
static void emit_axis(out_buffer *o, const printer *p, int dim, int64_t base, int64_t stride)
{
    const awl_tensor *t = p->t;
    char num[64];
    if (dim == t->ndim) {
        format_value(p, p->values[base], num, sizeof num);
        emit(o, "%*s", p->width, num);
        return;
    }
    int64_t n = t->shape[dim], inner = stride / (n ? n : 1);
    emit(o, "[");
    bool first = true;
    for (int64_t i = 0; i < n; i++) {
        if (!shown(p, i, n)) {
            if (i == EDGE_ITEMS) {
                if (dim == t->ndim - 1)
                    emit(o, ", ...");
                else
                    emit(o, ",\n%*s...", p->indent + dim + 1, "");
            }
            continue;
        }
        if (!first) {
            if (dim == t->ndim - 1)
                emit(o, ", ");
            else {
                emit(o, ",");
                for (int k = dim; k < t->ndim - 1; k++) emit(o, "\n");
                emit(o, "%*s", p->indent + dim + 1, "");
            }
        }
        first = false;
        emit_axis(o, p, dim + 1, base + i * inner, inner);
    }
    emit(o, "]");
}

size_t awl_repr(const awl_tensor *t, char *buf, size_t size)
{
    out_buffer o = {buf, size, 0};
    if (size) buf[0] = '\0';
    if (!t) {
        emit(&o, "NULL");
        return o.len;
    }
    int64_t n = awl_numel(t);
    double *values = awl_xmalloc((size_t)n * sizeof *values);
    awl_scope_begin();
    awl_tensor *f64 = awl_tensor_cast((awl_tensor *)t, AWL_F64);
    bool ok = f64 && awl_to_host(f64, values, (size_t)n * sizeof *values) == AWL_OK;
    awl_scope_end();
    if (!ok) {
        free(values);
        emit(&o, "tensor(<unreadable: %s>)", awl_last_error());
        return o.len;
    }
    printer p = {t, values, choose_style(t, values, n), 0, n > SUMMARY_THRESHOLD, 7};
    char num[64];
    for (int64_t i = 0; i < n; i++) {
        int w = format_value(&p, values[i], num, sizeof num);
        if (w > p.width) p.width = w;
    }
    emit(&o, "tensor(");
    if (n == 0)
        emit(&o, "[]");
    else
        emit_axis(&o, &p, 0, 0, n);
    if (t->dtype != AWL_F32) emit(&o, ", dtype=%s", awl_dtype_name(t->dtype));
    if (strcmp(t->storage->device.backend->name, "cpu") != 0) {
        char dev[32];
        emit(&o, ", device='%s'", awl_tensor_device_name(t, dev, sizeof dev));
    }
    if (t->grad_fn)
        emit(&o, ", grad_fn=<%s>", t->grad_fn->name);
    else if (t->requires_grad)
        emit(&o, ", requires_grad=True");
    emit(&o, ")");
    free(values);
    return o.len;
}

void awl_fprint(FILE *f, const awl_tensor *t)
{
    size_t need = awl_repr(t, NULL, 0) + 1;
    char *buf = awl_xmalloc(need);
    awl_repr(t, buf, need);
    fprintf(f, "%s\n", buf);
    free(buf);
}

void awl_print(const awl_tensor *t) { awl_fprint(stdout, t); }
