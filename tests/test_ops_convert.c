/*
 * tests/test_ops_convert.c - cast and to(device).
 *
 * Values survive a cast (rounded to the narrower type), the gradient comes
 * back in the input's dtype, integer casts end the graph, and a device
 * transfer sends the gradient back to the input's device (checked across
 * devices when a second backend is present).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"

START_TEST(test_cast_values)
{
    awl_gc_begin(60);
    static const awl_dtype types[] = {AWL_F32, AWL_F64, AWL_I32};
    const double v[6] = {-2.75, -1.5, 0, 0.3, 1.9, 123456.7};
    for (int from = 0; from < 3; from++)
        for (int to = 0; to < 3; to++)
            for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
                awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3), types[from]);
                if (layout == 0) x = awl_gc_from_doubles(v, AWL_SHAPE(2, 3), types[from]);
                awl_tensor *y = awl_cast(x, types[to]);
                ck_assert_msg(y, "%s", awl_last_error());
                ck_assert_int_eq(y->dtype, types[to]);
                ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3)));
                double *xv = awl_gc_values(x), *yv = awl_gc_values(y), want[6];
                for (int i = 0; i < 6; i++) {
                    want[i] = xv[i];
                    if (types[to] == AWL_F32) want[i] = (float)want[i];
                    if (types[to] == AWL_I32) want[i] = trunc(want[i]);
                }
                ck_assert(awl_gc_allclose(yv, want, 6, 0, 0, "cast"));
                free(xv);
                free(yv);
            }
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_cast_gradient_dtype)
{
    awl_gc_begin(61);
    /* float32 leaf through a float64 computation: the gradient is float32 */
    awl_tensor *x = awl_requires_grad_(awl_gc_randn_dtype(AWL_SHAPE(2, 3), AWL_F32), true);
    awl_tensor *w = awl_gc_randn(AWL_SHAPE(2, 3));
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul(awl_cast(x, AWL_F64), w))), 0);
    ck_assert_int_eq(x->grad->dtype, AWL_F32);
    double *g = awl_gc_values(x->grad), *wv = awl_gc_values(w), want[6];
    for (int i = 0; i < 6; i++) want[i] = (float)wv[i];
    ck_assert(awl_gc_allclose(g, want, 6, 0, 0, "d cast"));
    free(g);
    free(wv);
    awl_clear_grad(x);

    /* float64 leaf through float32 */
    awl_tensor *d = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(3)), true);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul_scalar(awl_cast(d, AWL_F32), 3))), 0);
    ck_assert_int_eq(d->grad->dtype, AWL_F64);
    ck_assert_double_eq(awl_item(awl_sum_all(d->grad)), 9.0);
    awl_clear_grad(d);

    /* integers end the graph; casting to the same dtype keeps it */
    ck_assert(!awl_cast(d, AWL_I32)->requires_grad);
    awl_tensor *same = awl_cast(d, AWL_F64);
    ck_assert(same->requires_grad);
    ck_assert_ptr_eq(same->storage, d->storage);
    ck_assert(awl_gc_end());
}
END_TEST

/* A device other than the test device, or NULL when there is none. */
static const char *other_device(void)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return "cpu";
    return awl_device_available("cuda:0") ? "cuda:0" : NULL;
}

static awl_tensor *call_roundtrip(awl_tensor *const *in, void *user)
{
    const char *other = user;
    return awl_to(awl_tanh(awl_to(in[0], other)), awl_gc_device());
}

START_TEST(test_to_device)
{
    awl_gc_begin(62);
    /* same device: no copy, gradient passes through */
    awl_tensor *x = awl_gc_permuted(AWL_SHAPE(3, 2));
    awl_tensor *y = awl_to(x, awl_gc_device());
    ck_assert_ptr_eq(y->storage, x->storage);
    char here[32];
    awl_tensor_device_name(x, here, sizeof here);
    ck_assert(awl_gradcheck(call_roundtrip, here, 1, &x, "to same device"));
    /* across devices, when a second one exists */
    const char *other = other_device();
    if (other) {
        awl_tensor *moved = awl_to(x, other);
        char name[32];
        ck_assert_str_eq(awl_tensor_device_name(moved, name, sizeof name), other);
        ck_assert(awl_gradcheck(call_roundtrip, (void *)other, 1, &x, "to other device"));
        awl_tensor *leaf = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(4)), true);
        ck_assert_int_eq(awl_backward(awl_sum_all(awl_to(leaf, other))), 0);
        ck_assert_str_eq(awl_tensor_device_name(leaf->grad, name, sizeof name), here);
        awl_clear_grad(leaf);
    }
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_convert", test_cast_values, test_cast_gradient_dtype,
                            test_to_device);
}
