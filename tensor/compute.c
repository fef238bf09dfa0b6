/*
 * tensor/compute.c - raw compute: checks, broadcasting, dispatch.
 *
 * Each function here validates its inputs (dtypes, devices, shapes) and
 * reports bad ones under the name of the public op a user called
 * ("awl_add: shapes (2,3) and (4,3) cannot be broadcast"), allocates the
 * result, builds the kernel views, and calls the backend once.
 *
 * Broadcasting never copies: an operand is handed to the kernel as a view of
 * the output's shape in which the broadcast axes have stride 0.
 *
 * The autograd ops (autograd/) call these and add graph recording; optimizers
 * and the engine use the in-place `_out` / `_` variants directly.
 */
#include "tensor/tensor_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static const awl_backend *backend_of(const awl_tensor *t) { return t->storage->device.backend; }

/* The result of a kernel call: t, or NULL (t discarded) on failure. */
static awl_tensor *finish(const char *op, awl_tensor *t, int status)
{
    if (status < 0) {
        awl_backend_status(op, status);
        awl_discard(t);
        return NULL;
    }
    return t;
}

static int check_same_dtype(const char *op, const awl_tensor *a, const awl_tensor *b)
{
    if (a->dtype == b->dtype) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "%s: dtypes differ: %s and %s", op, awl_dtype_name(a->dtype),
                     awl_dtype_name(b->dtype));
}

/* NumPy broadcasting of two shapes, aligned at the trailing axis. */
static int broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                            int *ndim, int64_t *shape)
{
    int n = na > nb ? na : nb;
    for (int d = n - 1; d >= 0; d--) {
        int ia = d - (n - na), ib = d - (n - nb);
        int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            char a[160], b[160];
            return awl_error(AWL_ERR_INVALID, "%s: shapes %s and %s cannot be broadcast", op,
                             awl_format_shape(na, sa, a, sizeof a),
                             awl_format_shape(nb, sb, b, sizeof b));
        }
        shape[d] = x == 1 ? y : x;
    }
    *ndim = n;
    return AWL_OK;
}

/* t as a view of shape (ndim, shape): new leading axes and stretched size-1
 * axes read with stride 0. The shape must be one t broadcasts to. */
static awl_view broadcast_view(const awl_tensor *t, int ndim, const int64_t *shape)
{
    awl_view v = awl_tensor_view(t);
    v.ndim = ndim;
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int src = d - lead;
        v.shape[d] = shape[d];
        v.strides[d] = (src < 0 || t->shape[src] != shape[d]) ? 0 : t->strides[src];
    }
    return v;
}

/* dst's kernel copy of in into out, traced ("copy": strided copies, casts,
 * concatenation). */
static int traced_copy(const awl_tensor *dst, const awl_view *out, const awl_view *in)
{
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "copy", dst, AWL_WORK(NONE, 0), 1, 2, (const awl_view *[]){out, in});
    return awl_trace_end(&k, backend_of(dst)->copy(out, in));
}

/* Whether t broadcasts to exactly (ndim, shape). */
static int check_broadcasts_to(const char *op, const awl_tensor *t, int ndim, const int64_t *shape)
{
    int n;
    int64_t joint[AWL_MAX_DIMS];
    bool ok = t->ndim <= ndim &&
              broadcast_shapes(op, t->ndim, t->shape, ndim, shape, &n, joint) == AWL_OK;
    for (int d = 0; ok && d < ndim; d++) ok = joint[d] == shape[d];
    if (ok) return AWL_OK;
    char a[160], b[160];
    return awl_error(AWL_ERR_INVALID, "%s: shape %s cannot be broadcast to %s", op,
                     awl_shape_str(t, a, sizeof a), awl_format_shape(ndim, shape, b, sizeof b));
}

/* A view of t with axis `dim` restricted to [start, start + len). */
static awl_view narrow_view(const awl_tensor *t, int dim, int64_t start, int64_t len)
{
    awl_view v = awl_tensor_view(t);
    v.offset += start * t->strides[dim];
    v.shape[dim] = len;
    return v;
}

/* ---- element-wise --------------------------------------------------------------- */

/* Whether the op (a code of kernel's family, or 0) is defined for t's dtype
 * (backends/ops.h); records an error naming op otherwise. */
static int check_defined(const char *op, awl_kernel kernel, int code, const awl_tensor *t)
{
    if (awl_kernel_defined(kernel, code, t->dtype)) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "%s: %s tensors are not supported; cast to float32 first", op,
                     awl_dtype_name(t->dtype));
}

static int check_unary(const char *op, awl_unary_op code, const awl_tensor *x)
{
    if (!awl_unary_info(code))
        return awl_error(AWL_ERR_INVALID, "awl_tensor_unary: invalid op %d", (int)code);
    return check_defined(op, AWL_KERNEL_UNARY, code, x);
}

static int check_binary(const char *op, awl_binary_op code, const awl_tensor *a,
                        const awl_tensor *b)
{
    if (!awl_binary_info(code))
        return awl_error(AWL_ERR_INVALID, "awl_tensor_binary: invalid op %d", (int)code);
    if (check_same_dtype(op, a, b) < 0 || awl_check_same_device(op, a, b) < 0)
        return AWL_ERR_INVALID;
    return check_defined(op, AWL_KERNEL_BINARY, code, a);
}

awl_tensor *awl_tensor_unary(awl_unary_op op, awl_tensor *x, double alpha)
{
    if (!x) return NULL;
    char name[48];
    snprintf(name, sizeof name, "awl_%s", awl_unary_op_name(op));
    if (check_unary(name, op, x) < 0) return NULL;
    awl_tensor *out = awl_tensor_alloc(name, x->storage->device, x->ndim, x->shape, x->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, awl_unary_op_name(op), x, AWL_WORK(OUTPUT, 1), 1, 2,
                    (const awl_view *[]){&vo, &vx});
    return finish(name, out, awl_trace_end(&k, backend_of(x)->unary(op, &vo, &vx, alpha)));
}

awl_tensor *awl_tensor_binary(awl_binary_op op, awl_tensor *a, awl_tensor *b)
{
    if (!a || !b) return NULL;
    char name[48];
    snprintf(name, sizeof name, "awl_%s", awl_binary_op_name(op));
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    if (check_binary(name, op, a, b) < 0 ||
        broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, &ndim, shape) < 0)
        return NULL;
    awl_tensor *out = awl_tensor_alloc(name, a->storage->device, ndim, shape, a->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out);
    awl_view va = broadcast_view(a, ndim, shape), vb = broadcast_view(b, ndim, shape);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, awl_binary_op_name(op), a, AWL_WORK(OUTPUT, 1), 1, 3,
                    (const awl_view *[]){&vo, &va, &vb});
    return finish(name, out, awl_trace_end(&k, backend_of(a)->binary(op, &vo, &va, &vb)));
}

awl_tensor *awl_tensor_where(awl_tensor *cond, awl_tensor *a, awl_tensor *b)
{
    if (!cond || !a || !b) return NULL;
    const char *op = "awl_where";
    int n1, n2;
    int64_t s1[AWL_MAX_DIMS], s2[AWL_MAX_DIMS];
    if (check_same_dtype(op, a, b) < 0 || awl_check_same_device(op, a, b) < 0 ||
        awl_check_same_device(op, cond, a) < 0 ||
        broadcast_shapes(op, a->ndim, a->shape, b->ndim, b->shape, &n1, s1) < 0 ||
        broadcast_shapes(op, cond->ndim, cond->shape, n1, s1, &n2, s2) < 0)
        return NULL;
    awl_tensor *out = awl_tensor_alloc(op, a->storage->device, n2, s2, a->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vc = broadcast_view(cond, n2, s2);
    awl_view va = broadcast_view(a, n2, s2), vb = broadcast_view(b, n2, s2);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "where", a, AWL_WORK(NONE, 0), 1, 4,
                    (const awl_view *[]){&vo, &vc, &va, &vb});
    return finish(op, out, awl_trace_end(&k, backend_of(a)->where(&vo, &vc, &va, &vb)));
}

int awl_tensor_unary_out(awl_unary_op op, awl_tensor *dst, awl_tensor *x, double alpha)
{
    if (!dst || !x) return AWL_ERR_INVALID;
    char name[48];
    snprintf(name, sizeof name, "awl_%s", awl_unary_op_name(op));
    if (check_unary(name, op, x) < 0 || check_same_dtype(name, dst, x) < 0 ||
        awl_check_same_device(name, dst, x) < 0 ||
        check_broadcasts_to(name, x, dst->ndim, dst->shape) < 0)
        return AWL_ERR_INVALID;
    awl_view vo = awl_tensor_view(dst), vx = broadcast_view(x, dst->ndim, dst->shape);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, awl_unary_op_name(op), dst, AWL_WORK(OUTPUT, 1), 1, 2,
                    (const awl_view *[]){&vo, &vx});
    awl_tensor_written(dst);
    return awl_backend_status(name, awl_trace_end(&k, backend_of(dst)->unary(op, &vo, &vx, alpha)));
}

int awl_tensor_binary_out(awl_binary_op op, awl_tensor *dst, awl_tensor *a, awl_tensor *b)
{
    if (!dst || !a || !b) return AWL_ERR_INVALID;
    char name[48];
    snprintf(name, sizeof name, "awl_%s", awl_binary_op_name(op));
    if (check_binary(name, op, a, b) < 0 || check_same_dtype(name, dst, a) < 0 ||
        awl_check_same_device(name, dst, a) < 0 ||
        check_broadcasts_to(name, a, dst->ndim, dst->shape) < 0 ||
        check_broadcasts_to(name, b, dst->ndim, dst->shape) < 0)
        return AWL_ERR_INVALID;
    awl_view vo = awl_tensor_view(dst);
    awl_view va = broadcast_view(a, dst->ndim, dst->shape);
    awl_view vb = broadcast_view(b, dst->ndim, dst->shape);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, awl_binary_op_name(op), dst, AWL_WORK(OUTPUT, 1), 1, 3,
                    (const awl_view *[]){&vo, &va, &vb});
    awl_tensor_written(dst);
    return awl_backend_status(name, awl_trace_end(&k, backend_of(dst)->binary(op, &vo, &va, &vb)));
}

int awl_tensor_fill_(awl_tensor *dst, double value)
{
    if (!dst) return AWL_ERR_INVALID;
    awl_view v = awl_tensor_view(dst);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "fill", dst, AWL_WORK(NONE, 0), 1, 1, (const awl_view *[]){&v});
    awl_tensor_written(dst);
    return awl_backend_status("awl_fill_", awl_trace_end(&k, backend_of(dst)->fill(&v, value)));
}

/* ---- copies, dtypes and devices -------------------------------------------------- */

/* A host buffer holding t's elements row-major (t may live on any device). */
static void *to_host_buffer(const awl_tensor *t, size_t *nbytes)
{
    *nbytes = (size_t)awl_numel(t) * awl_dtype_size(t->dtype);
    void *buf = awl_xmalloc(*nbytes);
    if (awl_to_host(t, buf, *nbytes) < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* dst = src where the two live on different devices: through host memory. */
static int copy_across_devices(awl_tensor *dst, awl_tensor *src)
{
    size_t nbytes;
    void *host = to_host_buffer(src, &nbytes);
    if (!host) return AWL_ERR_DEVICE;
    awl_scope_begin();
    char name[32];
    awl_tensor *staged = awl_from_data(host, src->ndim, src->shape, src->dtype,
                                       awl_tensor_device_name(dst, name, sizeof name));
    int status = staged ? awl_tensor_copy_(dst, staged) : AWL_ERR_DEVICE;
    awl_scope_end();
    free(host);
    return status;
}

int awl_tensor_copy_(awl_tensor *dst, awl_tensor *src)
{
    if (!dst || !src) return AWL_ERR_INVALID;
    const char *op = "awl_copy_";
    if (check_broadcasts_to(op, src, dst->ndim, dst->shape) < 0) return AWL_ERR_INVALID;
    if (src->storage->device.backend != dst->storage->device.backend ||
        src->storage->device.index != dst->storage->device.index)
        return copy_across_devices(dst, src);
    awl_view vo = awl_tensor_view(dst), vi = broadcast_view(src, dst->ndim, dst->shape);
    awl_tensor_written(dst);
    return awl_backend_status(op, traced_copy(dst, &vo, &vi));
}

awl_tensor *awl_tensor_clone(awl_tensor *t)
{
    if (!t) return NULL;
    awl_tensor *out =
        awl_tensor_alloc("awl_clone", t->storage->device, t->ndim, t->shape, t->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vi = awl_tensor_view(t);
    return finish("awl_clone", out, traced_copy(t, &vo, &vi));
}

awl_tensor *awl_tensor_contiguous(awl_tensor *t)
{
    if (!t) return NULL;
    if (awl_is_contiguous(t)) return awl_tensor_detach(t);
    return awl_tensor_clone(t);
}

awl_tensor *awl_tensor_cast(awl_tensor *t, awl_dtype dtype)
{
    if (!t) return NULL;
    if (t->dtype == dtype) return awl_tensor_detach(t);
    awl_tensor *out = awl_tensor_alloc("awl_cast", t->storage->device, t->ndim, t->shape, dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vi = awl_tensor_view(t);
    return finish("awl_cast", out, traced_copy(t, &vo, &vi));
}

awl_tensor *awl_tensor_to_device(awl_tensor *t, const char *device)
{
    if (!t) return NULL;
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return NULL;
    if (d.backend == t->storage->device.backend && d.index == t->storage->device.index)
        return awl_tensor_detach(t);
    awl_tensor *out = awl_tensor_alloc("awl_to", d, t->ndim, t->shape, t->dtype);
    if (!out) return NULL;
    if (copy_across_devices(out, t) < 0) {
        awl_discard(out);
        return NULL;
    }
    return out;
}

/* ---- reductions -------------------------------------------------------------------- */

awl_tensor *awl_tensor_reduce(awl_reduce_op op, awl_tensor *x, int ndims, const int *dims,
                              bool keepdim)
{
    if (!x) return NULL;
    char name[48];
    snprintf(name, sizeof name, "awl_%s", awl_reduce_op_name(op));
    if (!awl_reduce_info(op)) {
        awl_error(AWL_ERR_INVALID, "awl_tensor_reduce: invalid op %d", (int)op);
        return NULL;
    }
    if (check_defined(name, AWL_KERNEL_REDUCE, op, x) < 0) return NULL;
    bool reduced[AWL_MAX_DIMS] = {false};
    for (int i = 0; i < ndims; i++) {
        int d;
        if (awl_normalize_dim(name, dims[i], x->ndim, &d) < 0) return NULL;
        if (reduced[d]) {
            awl_error(AWL_ERR_INVALID, "%s: dim %d listed twice", name, dims[i]);
            return NULL;
        }
        reduced[d] = true;
    }
    int64_t shape[AWL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (ndims == 0) reduced[d] = true;
        if (reduced[d] && x->shape[d] == 0 && (op == AWL_REDUCE_MAX || op == AWL_REDUCE_MIN)) {
            char buf[160];
            awl_error(AWL_ERR_INVALID, "%s: cannot reduce the empty dim %d of %s", name, d,
                      awl_shape_str(x, buf, sizeof buf));
            return NULL;
        }
        shape[d] = reduced[d] ? 1 : x->shape[d];
    }
    awl_tensor *out = awl_tensor_alloc(name, x->storage->device, x->ndim, shape, x->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, awl_reduce_op_name(op), x, AWL_WORK(INPUT, 1), 1, 2,
                    (const awl_view *[]){&vo, &vx});
    if (!finish(name, out, awl_trace_end(&k, backend_of(x)->reduce(op, &vo, &vx)))) return NULL;
    if (!keepdim) { /* drop the reduced axes from the fresh, contiguous result */
        int n = 0;
        for (int d = 0; d < x->ndim; d++)
            if (!reduced[d]) out->shape[n++] = x->shape[d];
        out->ndim = n;
        awl_contiguous_strides(n, out->shape, out->strides);
    }
    return out;
}

/* ---- matrix products --------------------------------------------------------------- */

/* The kernel views and result shape of a @ b under NumPy matmul rules. */
typedef struct matmul_plan {
    awl_view a, b;               /* (batch..., M, K), (batch..., K, N)    */
    int ndim;                    /* of the kernel's output               */
    int64_t shape[AWL_MAX_DIMS]; /* kernel output: (batch..., M, N)      */
    int result_ndim;             /* after removing promoted axes         */
    int64_t result_shape[AWL_MAX_DIMS];
} matmul_plan;

static int plan_matmul(const char *op, const awl_tensor *a, const awl_tensor *b, matmul_plan *p)
{
    char sa[160], sb[160];
    if (a->ndim == 0 || b->ndim == 0)
        return awl_error(AWL_ERR_INVALID, "%s: operands need at least 1 dimension: %s @ %s", op,
                         awl_shape_str(a, sa, sizeof sa), awl_shape_str(b, sb, sizeof sb));
    if (check_same_dtype(op, a, b) < 0 || check_defined(op, AWL_KERNEL_MATMUL, 0, a) < 0 ||
        awl_check_same_device(op, a, b) < 0)
        return AWL_ERR_INVALID;
    /* promote 1-D operands: a vector on the left is a row, on the right a column */
    awl_view va = awl_tensor_view(a), vb = awl_tensor_view(b);
    if (a->ndim == 1) {
        va.ndim = 2;
        va.shape[0] = 1;
        va.shape[1] = a->shape[0];
        va.strides[0] = 0;
        va.strides[1] = a->strides[0];
    }
    if (b->ndim == 1) {
        vb.ndim = 2;
        vb.shape[0] = b->shape[0];
        vb.shape[1] = 1;
        vb.strides[0] = b->strides[0];
        vb.strides[1] = 0;
    }
    int64_t M = va.shape[va.ndim - 2], K = va.shape[va.ndim - 1];
    int64_t K2 = vb.shape[vb.ndim - 2], N = vb.shape[vb.ndim - 1];
    if (K != K2)
        return awl_error(AWL_ERR_INVALID, "%s: inner dimensions differ: %s @ %s", op,
                         awl_shape_str(a, sa, sizeof sa), awl_shape_str(b, sb, sizeof sb));
    int nbatch;
    int64_t batch[AWL_MAX_DIMS];
    unsigned long errors = awl_error_count();
    if (broadcast_shapes(op, va.ndim - 2, va.shape, vb.ndim - 2, vb.shape, &nbatch, batch) < 0) {
        if (awl_error_count() != errors) /* restate with the operands' full shapes */
            awl_error(AWL_ERR_INVALID, "%s: batch dimensions cannot be broadcast: %s @ %s", op,
                      awl_shape_str(a, sa, sizeof sa), awl_shape_str(b, sb, sizeof sb));
        return AWL_ERR_INVALID;
    }
    if (nbatch + 2 > AWL_MAX_DIMS)
        return awl_error(AWL_ERR_INVALID, "%s: too many batch dimensions", op);
    /* stretch both operands to the common batch shape (zero strides) */
    awl_view *vs[2] = {&va, &vb};
    for (int k = 0; k < 2; k++) {
        awl_view *v = vs[k], w = *v;
        int lead = nbatch - (v->ndim - 2);
        for (int d = 0; d < nbatch; d++) {
            int src = d - lead;
            w.shape[d] = batch[d];
            w.strides[d] = (src < 0 || v->shape[src] != batch[d]) ? 0 : v->strides[src];
        }
        for (int d = 0; d < 2; d++) {
            w.shape[nbatch + d] = v->shape[v->ndim - 2 + d];
            w.strides[nbatch + d] = v->strides[v->ndim - 2 + d];
        }
        w.ndim = nbatch + 2;
        *v = w;
    }
    p->a = va;
    p->b = vb;
    p->ndim = nbatch + 2;
    memcpy(p->shape, batch, (size_t)nbatch * sizeof *batch);
    p->shape[nbatch] = M;
    p->shape[nbatch + 1] = N;
    p->result_ndim = 0;
    for (int d = 0; d < nbatch; d++) p->result_shape[p->result_ndim++] = batch[d];
    if (a->ndim > 1) p->result_shape[p->result_ndim++] = M;
    if (b->ndim > 1) p->result_shape[p->result_ndim++] = N;
    return AWL_OK;
}

awl_tensor *awl_tensor_matmul(awl_tensor *a, awl_tensor *b)
{
    if (!a || !b) return NULL;
    const char *op = "awl_matmul";
    matmul_plan p;
    if (plan_matmul(op, a, b, &p) < 0) return NULL;
    awl_tensor *out = awl_tensor_alloc(op, a->storage->device, p.ndim, p.shape, a->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "matmul", a, AWL_WORK(MATMUL, 0), 1, 3,
                    (const awl_view *[]){&vo, &p.a, &p.b});
    if (!finish(op, out, awl_trace_end(&k, backend_of(a)->matmul(&vo, &p.a, &p.b, false))))
        return NULL;
    out->ndim = p.result_ndim; /* drop promoted axes: same elements, same order */
    memcpy(out->shape, p.result_shape, sizeof out->shape);
    awl_contiguous_strides(out->ndim, out->shape, out->strides);
    return out;
}

int awl_tensor_matmul_out(awl_tensor *dst, awl_tensor *a, awl_tensor *b, bool accumulate)
{
    if (!dst || !a || !b) return AWL_ERR_INVALID;
    const char *op = "awl_matmul";
    matmul_plan p;
    if (plan_matmul(op, a, b, &p) < 0 || check_same_dtype(op, dst, a) < 0 ||
        awl_check_same_device(op, dst, a) < 0)
        return AWL_ERR_INVALID;
    bool ok = dst->ndim == p.result_ndim;
    for (int d = 0; ok && d < dst->ndim; d++) ok = dst->shape[d] == p.result_shape[d];
    if (!ok) {
        char s1[160], s2[160];
        return awl_error(AWL_ERR_INVALID, "%s: output has shape %s, the product has %s", op,
                         awl_shape_str(dst, s1, sizeof s1),
                         awl_format_shape(p.result_ndim, p.result_shape, s2, sizeof s2));
    }
    awl_view vo = awl_tensor_view(dst);
    if (vo.ndim != p.ndim) { /* re-insert the promoted axes as size-1 axes */
        vo.ndim = p.ndim;
        memcpy(vo.shape, p.shape, sizeof vo.shape);
        int src = 0;
        for (int d = 0; d < p.ndim; d++) {
            bool promoted = (d == p.ndim - 2 && a->ndim == 1) || (d == p.ndim - 1 && b->ndim == 1);
            vo.strides[d] = promoted ? 0 : dst->strides[src++];
        }
    }
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "matmul", dst, accumulate ? AWL_WORK_RMW(MATMUL, 1) : AWL_WORK(MATMUL, 0),
                    1, 3, (const awl_view *[]){&vo, &p.a, &p.b});
    awl_tensor_written(dst);
    return awl_backend_status(
        op, awl_trace_end(&k, backend_of(dst)->matmul(&vo, &p.a, &p.b, accumulate)));
}

/* ---- indexing ------------------------------------------------------------------------ */

/* Checks every index lies in [0, limit): on the device when its backend
 * can (the report then comes at the next synchronisation), else on the
 * host, the indices copied there. */
static int check_indices(const char *op, const awl_tensor *idx, int64_t limit, const char *what)
{
    if (idx->dtype != AWL_I32)
        return awl_error(AWL_ERR_INVALID, "%s: indices must be int32, not %s", op,
                         awl_dtype_name(idx->dtype));
    int64_t n = awl_numel(idx);
    if (n == 0) return AWL_OK;
    const awl_backend *be = backend_of(idx);
    if (be->check_indices) {
        awl_view v = awl_tensor_view(idx);
        return awl_backend_status(op, be->check_indices(&v, limit, op, what));
    }
    size_t nbytes;
    int32_t *host = to_host_buffer(idx, &nbytes);
    if (!host) return AWL_ERR_DEVICE;
    int status = AWL_OK;
    for (int64_t i = 0; i < n; i++) {
        if (host[i] < 0 || host[i] >= limit) {
            status = awl_error(AWL_ERR_INVALID, "%s: index %d out of range for %lld %s", op,
                               host[i], (long long)limit, what);
            break;
        }
    }
    free(host);
    return status;
}

int awl_tensor_check_indices(awl_tensor *idx, int64_t limit, const char *op, const char *what)
{
    if (!idx) return AWL_ERR_INVALID;
    return check_indices(op, idx, limit, what);
}

bool awl_tensor_indices_checked_later(const awl_tensor *t)
{
    return t && backend_of(t)->check_indices != NULL;
}

awl_tensor *awl_tensor_index_select(awl_tensor *src, awl_tensor *idx)
{
    if (!src || !idx) return NULL;
    const char *op = "awl_embedding";
    char s1[160], s2[160];
    if (src->ndim < 1 || idx->ndim + src->ndim - 1 > AWL_MAX_DIMS) {
        awl_error(AWL_ERR_INVALID, "%s: cannot index %s with indices of shape %s", op,
                  awl_shape_str(src, s1, sizeof s1), awl_shape_str(idx, s2, sizeof s2));
        return NULL;
    }
    if (awl_check_same_device(op, src, idx) < 0 ||
        check_indices(op, idx, src->shape[0], "rows") < 0)
        return NULL;
    int64_t shape[AWL_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < idx->ndim; d++) shape[ndim++] = idx->shape[d];
    for (int d = 1; d < src->ndim; d++) shape[ndim++] = src->shape[d];
    awl_tensor *out = awl_tensor_alloc(op, src->storage->device, ndim, shape, src->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vs = awl_tensor_view(src), vi = awl_tensor_view(idx);
    awl_trace k;
    /* the rows read are as many as the rows written */
    AWL_TRACE_BEGIN(&k, "index_select", src, AWL_WORK(NONE, 0), 1, 2,
                    (const awl_view *[]){&vo, &vi});
    if (k.on) k.e.bytes *= 2;
    return finish(op, out, awl_trace_end(&k, backend_of(src)->index_select(&vo, &vs, &vi)));
}

int awl_tensor_index_add_(awl_tensor *dst, awl_tensor *idx, awl_tensor *src)
{
    if (!dst || !idx || !src) return AWL_ERR_INVALID;
    const char *op = "awl_index_add_";
    char s1[160], s2[160], s3[160];
    bool ok = dst->ndim >= 1 && src->ndim == idx->ndim + dst->ndim - 1;
    for (int d = 0; ok && d < idx->ndim; d++) ok = src->shape[d] == idx->shape[d];
    for (int d = 1; ok && d < dst->ndim; d++) ok = src->shape[idx->ndim + d - 1] == dst->shape[d];
    if (!ok)
        return awl_error(AWL_ERR_INVALID, "%s: dst %s, indices %s and source %s do not fit", op,
                         awl_shape_str(dst, s1, sizeof s1), awl_shape_str(idx, s2, sizeof s2),
                         awl_shape_str(src, s3, sizeof s3));
    if (check_same_dtype(op, dst, src) < 0 || awl_check_same_device(op, dst, src) < 0 ||
        awl_check_same_device(op, dst, idx) < 0 ||
        check_indices(op, idx, dst->shape[0], "rows") < 0)
        return AWL_ERR_INVALID;
    awl_view vd = awl_tensor_view(dst), vi = awl_tensor_view(idx), vs = awl_tensor_view(src);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "index_add", dst, AWL_WORK(INPUT, 1), 0, 2, (const awl_view *[]){&vs, &vi});
    if (k.on) k.e.bytes *= 2; /* the rows added to are read and written: as many as the source's */
    awl_tensor_written(dst);
    return awl_backend_status(op, awl_trace_end(&k, backend_of(dst)->index_add(&vd, &vi, &vs)));
}

/* gather/scatter_add shapes: idx has x's ndim and agrees with it except
 * along dim. */
static int check_gather_shapes(const char *op, const awl_tensor *x, int dim, const awl_tensor *idx)
{
    bool ok = idx->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++) ok = d == dim || idx->shape[d] == x->shape[d];
    if (ok) return AWL_OK;
    char s1[160], s2[160];
    return awl_error(AWL_ERR_INVALID, "%s: indices %s do not match %s outside dim %d", op,
                     awl_shape_str(idx, s1, sizeof s1), awl_shape_str(x, s2, sizeof s2), dim);
}

awl_tensor *awl_tensor_gather(awl_tensor *x, int dim, awl_tensor *idx)
{
    if (!x || !idx) return NULL;
    const char *op = "awl_gather";
    int d;
    if (awl_normalize_dim(op, dim, x->ndim, &d) < 0 || check_gather_shapes(op, x, d, idx) < 0 ||
        awl_check_same_device(op, x, idx) < 0 || check_indices(op, idx, x->shape[d], "entries") < 0)
        return NULL;
    awl_tensor *out = awl_tensor_alloc(op, x->storage->device, idx->ndim, idx->shape, x->dtype);
    if (!out) return NULL;
    awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x), vi = awl_tensor_view(idx);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "gather", x, AWL_WORK(NONE, 0), 1, 2, (const awl_view *[]){&vo, &vi});
    if (k.on) k.e.bytes *= 2;
    return finish(op, out, awl_trace_end(&k, backend_of(x)->gather(&vo, &vx, d, &vi)));
}

int awl_tensor_scatter_add_(awl_tensor *dst, int dim, awl_tensor *idx, awl_tensor *src)
{
    if (!dst || !idx || !src) return AWL_ERR_INVALID;
    const char *op = "awl_scatter_add_";
    int d;
    if (awl_normalize_dim(op, dim, dst->ndim, &d) < 0 || check_gather_shapes(op, dst, d, idx) < 0)
        return AWL_ERR_INVALID;
    if (!awl_same_shape(idx, src)) {
        char s1[160], s2[160];
        return awl_error(AWL_ERR_INVALID, "%s: indices %s and source %s differ in shape", op,
                         awl_shape_str(idx, s1, sizeof s1), awl_shape_str(src, s2, sizeof s2));
    }
    if (check_same_dtype(op, dst, src) < 0 || awl_check_same_device(op, dst, src) < 0 ||
        awl_check_same_device(op, dst, idx) < 0 ||
        check_indices(op, idx, dst->shape[d], "entries") < 0)
        return AWL_ERR_INVALID;
    awl_view vd = awl_tensor_view(dst), vi = awl_tensor_view(idx), vs = awl_tensor_view(src);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "scatter_add", dst, AWL_WORK(INPUT, 1), 0, 2,
                    (const awl_view *[]){&vs, &vi});
    if (k.on) k.e.bytes *= 2;
    awl_tensor_written(dst);
    return awl_backend_status(op,
                              awl_trace_end(&k, backend_of(dst)->scatter_add(&vd, d, &vi, &vs)));
}

/* ---- joining ------------------------------------------------------------------------- */

awl_tensor *awl_tensor_concat(int n, awl_tensor *const *ts, int dim)
{
    const char *op = "awl_concat";
    if (n < 1 || !ts) {
        awl_error(AWL_ERR_INVALID, "%s: needs at least one tensor", op);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!ts[i]) return NULL;
    const awl_tensor *first = ts[0];
    int d;
    if (awl_normalize_dim(op, dim, first->ndim, &d) < 0) return NULL;
    int64_t shape[AWL_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const awl_tensor *t = ts[i];
        if (check_same_dtype(op, first, t) < 0 || awl_check_same_device(op, first, t) < 0)
            return NULL;
        bool ok = t->ndim == first->ndim;
        for (int k = 0; ok && k < t->ndim; k++) ok = k == d || t->shape[k] == first->shape[k];
        if (!ok) {
            char s1[160], s2[160];
            awl_error(AWL_ERR_INVALID, "%s: tensor %d has shape %s, tensor 0 has %s (dim %d)", op,
                      i, awl_shape_str(t, s1, sizeof s1), awl_shape_str(first, s2, sizeof s2), d);
            return NULL;
        }
        shape[d] += t->shape[d];
    }
    awl_tensor *out =
        awl_tensor_alloc(op, first->storage->device, first->ndim, shape, first->dtype);
    if (!out) return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        awl_view vo = narrow_view(out, d, at, ts[i]->shape[d]), vi = awl_tensor_view(ts[i]);
        if (!finish(op, out, traced_copy(out, &vo, &vi))) return NULL;
        at += ts[i]->shape[d];
    }
    return out;
}
