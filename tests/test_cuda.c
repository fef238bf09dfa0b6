/*
 * tests/test_cuda.c - the CUDA backend: every kernel through awl-check's
 * harness (tools/awl-check), on every rung of the attention ladder and in
 * TF32 mode, plus what is particular to the device: its memory cache and
 * out-of-memory message, refusals, TF32 products that really use the
 * tensor cores, float32 products on awl's 3xTF32 kernel as accurate as
 * cuBLAS's sgemm, and kernels launched to overlap the one before them that
 * still read what it wrote.
 *
 * The harness checks each kernel against the float64 reference over its
 * grid of dtypes and layouts (bfloat16 included: CUDA computes in it),
 * with guard bytes, untouched gaps and two runs that must agree bit for
 * bit; strict, so a kernel that declines a case it declares is a failure.
 * Without a GPU (CI) the program prints why it skipped and exits 0.
 *
 *     CK_FORK=no ./build/test_cuda
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "tools/awl-check/awl_check.h"

static const awl_backend *cuda;

/* awl-check on cuda for op (with --set attention=rung first, and the
 * tolerances scaled); every check must pass or be declared unsupported. */
static void conforms(const char *op, const char *rung, double tol_scale)
{
    ck_assert_int_eq(cuda->set_option("attention", rung ? rung : "auto"), AWL_OK);
    awl_check_options o = {.device = "cuda",
                           .op = op,
                           .dtype = -1,
                           .seed = 3,
                           .tol_scale = tol_scale,
                           .quiet = true,
                           .strict = true};
    awl_check_counts c = {0, 0, 0, 0};
    int status = awl_check_run(&o, &c);
    ck_assert_int_eq(cuda->set_option("attention", "auto"), AWL_OK);
    ck_assert_msg(status == AWL_CHECK_OK && c.passed > 0,
                  "awl-check --device cuda --op %s%s%s: %d passed, %d failed, %d missing", op,
                  rung ? " --set attention=" : "", rung ? rung : "", c.passed, c.failed, c.missing);
}

#define CONFORMS(test, op)                                                                         \
    START_TEST(test) { conforms(op, NULL, 1); }                                                    \
    END_TEST

CONFORMS(test_fill, "fill")
CONFORMS(test_copy, "copy")
CONFORMS(test_unary, "unary")
CONFORMS(test_binary, "binary")
CONFORMS(test_where, "where")
CONFORMS(test_reduce, "reduce")
CONFORMS(test_matmul, "matmul")
CONFORMS(test_index, "index")
CONFORMS(test_gather_scatter, "gather")
CONFORMS(test_scatter, "scatter")
CONFORMS(test_random, "random")
CONFORMS(test_softmax, "softmax")
CONFORMS(test_layernorm, "layernorm")
CONFORMS(test_cross_entropy, "cross_entropy")
CONFORMS(test_matmul_bias, "matmul_bias")
CONFORMS(test_adamw, "adamw")
CONFORMS(test_dropout, "dropout")

/* Attention on every rung: tensor cores (float32 as 3xTF32; bfloat16 mma,
 * its forward and dK/dV on wgmma where the build and the device have them)
 * with the backward's dS stored by its first kernel for its second (the
 * default), in two kernels that recompute it ("split"), in one pass with dQ
 * in slices ("one-pass"), bfloat16's wgmma kernels on mma.sync ("mma"), the
 * CUDA-core kernels ("simt"), each with dropout and without (awl-check's
 * attention cases include dropout); and float32 in TF32 mode, whose single
 * TF32 pass keeps 10 mantissa bits (tolerances x 500). */
START_TEST(test_attention)
{
    static const char *const rungs[] = {NULL, "split", "one-pass", "mma", "simt"};
    for (int r = 0; r < 5; r++) conforms("attention", rungs[r], 1);
    cuda->set_matmul_fast_fp32(true);
    for (int r = 0; r < 3; r++) conforms("attention", rungs[r], 500);
    cuda->set_matmul_fast_fp32(false);
}
END_TEST

/* ---- what is particular to the device ------------------------------------------------- */

START_TEST(test_device_and_memory)
{
    ck_assert_int_ge(cuda->device_count(), 1);
    ck_assert_str_eq(cuda->name, "cuda");
    void *p = cuda->alloc(0, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(cuda->memory_reserved(0), 1000);
    cuda->free(0, p, 1000);
    void *q = cuda->alloc(0, 900); /* same 1024-byte class: the cached block */
    ck_assert_ptr_eq(p, q);
    cuda->free(0, q, 900);
    cuda->empty_cache(0);
    ck_assert_uint_eq(cuda->memory_reserved(0), 0);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(0, (size_t)1 << 52));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cuda:0"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "4503599627370496"));
    /* The device is still usable after an out-of-memory. */
    p = cuda->alloc(0, 4096);
    ck_assert_ptr_nonnull(p);
    cuda->free(0, p, 4096);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(cuda->device_count() + 3, 16));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_DEVICE);

    awl_clear_error();
    ck_assert_int_eq(cuda->set_option("attention", "fastest"), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "auto, simt, split, one-pass or mma"));
}
END_TEST

/* int32 has no matmul, exp or division (as on the CPU backend): refused
 * with a message naming the op, not computed with a silent rounding. */
START_TEST(test_refusals)
{
    void *d = cuda->alloc(0, 64);
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = d;
    v.dtype = AWL_I32;
    v.ndim = 2;
    v.shape[0] = v.shape[1] = 2;
    v.strides[0] = 2;
    v.strides[1] = 1;
    awl_clear_error();
    ck_assert_int_eq(cuda->matmul(&v, &v, &v, false), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "int32"));
    awl_clear_error();
    ck_assert_int_eq(cuda->unary(AWL_UNARY_EXP, &v, &v, 0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "exp"));
    awl_clear_error();
    ck_assert_int_eq(cuda->binary(AWL_BINARY_DIV, &v, &v, &v), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "div"));
    cuda->free(0, d, 64);
}
END_TEST

/* Relative L2 error of a (256, 1024) @ (1024, 256) float32 product on cuda
 * against float64 on the CPU. */
static double product_error(void)
{
    awl_scope_begin();
    awl_manual_seed(11);
    awl_tensor *a = awl_randn(AWL_SHAPE(256, 1024), AWL_F64, "cpu");
    awl_tensor *b = awl_randn(AWL_SHAPE(1024, 256), AWL_F64, "cpu");
    awl_tensor *want = awl_tensor_matmul(a, b);
    awl_tensor *got = awl_tensor_to_device(
        awl_tensor_matmul(awl_tensor_to_device(awl_tensor_cast(a, AWL_F32), "cuda"),
                          awl_tensor_to_device(awl_tensor_cast(b, AWL_F32), "cuda")),
        "cpu");
    awl_tensor *d = awl_tensor_binary(AWL_BINARY_SUB, awl_tensor_cast(got, AWL_F64), want);
    double num = awl_item(
        awl_tensor_reduce(AWL_REDUCE_SUM, awl_tensor_binary(AWL_BINARY_MUL, d, d), 0, NULL, false));
    double den = awl_item(awl_tensor_reduce(
        AWL_REDUCE_SUM, awl_tensor_binary(AWL_BINARY_MUL, want, want), 0, NULL, false));
    awl_scope_end();
    return sqrt(num / den);
}

START_TEST(test_matmul_tf32)
{
    double exact = product_error();
    ck_assert_int_eq(awl_set_float32_matmul_precision("high"), AWL_OK);
    double fast = product_error();
    ck_assert_int_eq(awl_set_float32_matmul_precision("highest"), AWL_OK);
    ck_assert_int_eq(cuda->set_option("fp32_matmul", "sgemm"), AWL_OK);
    double sgemm = product_error();
    ck_assert_int_eq(cuda->set_option("fp32_matmul", "3xtf32"), AWL_OK);
    printf("test_cuda: matmul 256x1024x256 relative error: fp32 %.2e (cuBLAS sgemm %.2e), "
           "tf32 %.2e\n",
           exact, sgemm, fast);
    ck_assert_msg(exact < 1e-6, "float32 product error %.2e", exact);
    ck_assert_msg(sgemm < 1e-6, "cuBLAS sgemm product error %.2e", sgemm);
    /* the sides suit awl's 3xTF32 kernel: sgemm's sums round differently */
    ck_assert_msg(exact != sgemm, "3xTF32 and sgemm gave the same product (%.3e)", exact);
    awl_clear_error();
    ck_assert_int_eq(cuda->set_option("fp32_matmul", "fast"), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "3xtf32 or sgemm"));
    /* TF32 keeps 10 mantissa bits: if the error did not grow, TF32 was not used. */
    ck_assert_msg(fast > 10 * exact && fast < 5e-3, "TF32 mode: %.2e vs %.2e", fast, exact);
    ck_assert_msg(cuda->matmul_bias != NULL, "the CUDA backend has a bias epilogue");
}
END_TEST

/* Programmatic dependent launch (cuda_common.cuh, "launches") lets each
 * kernel be scheduled while the one before it drains, and each kernel waits
 * for that one before it reads. A chain of 400 small kernels, each reading
 * what the one before wrote, must give the CPU's bits with the setting on
 * (a kernel reading too early would see stale values) and off; the setting
 * refuses other values. */
static void dependent_chain(const char *device, float *out, int64_t n)
{
    awl_scope_begin();
    awl_manual_seed(5);
    awl_tensor *x = awl_tensor_to_device(awl_randn(AWL_SHAPE(n), AWL_F32, "cpu"), device);
    awl_tensor *scale = awl_full(AWL_SHAPE(1), 1.001, AWL_F32, device);
    awl_tensor *shift = awl_full(AWL_SHAPE(n), -0.25, AWL_F32, device);
    for (int i = 0; i < 200; i++) {
        x = awl_tensor_binary(AWL_BINARY_MUL, x, scale);
        x = awl_tensor_binary(AWL_BINARY_ADD, shift, x);
    }
    ck_assert_int_eq(awl_to_host(x, out, (size_t)n * sizeof(float)), AWL_OK);
    awl_scope_end();
}

START_TEST(test_dependent_launch)
{
    enum { N = 1 << 16 };
    static float want[N], got[N];
    dependent_chain("cpu", want, N);
    const char *settings[] = {"on", "off", "on"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cuda->set_option("dependent_launch", settings[i]), AWL_OK);
        memset(got, 0, sizeof got);
        dependent_chain("cuda", got, N);
        ck_assert_msg(memcmp(got, want, sizeof got) == 0,
                      "dependent_launch=%s: the chain's result differs from the CPU's",
                      settings[i]);
    }
    awl_clear_error();
    ck_assert_int_eq(cuda->set_option("dependent_launch", "sometimes"), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "not on or off"));
}
END_TEST

int main(void)
{
    cuda = awl_cuda_backend();
    if (!cuda) {
        printf("test_cuda: skipped: awl was built without CUDA (AWL_WITH_CUDA=OFF)\n");
        return 0;
    }
    if (cuda->device_count() == 0) {
        printf("test_cuda: skipped: no CUDA device\n");
        return 0;
    }
    Suite *s = suite_create("cuda");
    const struct {
        const char *group;
        const TTest *test;
    } tests[] = {
        {"device", test_device_and_memory},
        {"device", test_refusals},
        {"device", test_matmul_tf32},
        {"device", test_dependent_launch},
        {"primitives", test_fill},
        {"primitives", test_copy},
        {"primitives", test_unary},
        {"primitives", test_binary},
        {"primitives", test_where},
        {"primitives", test_reduce},
        {"primitives", test_matmul},
        {"primitives", test_index},
        {"primitives", test_gather_scatter},
        {"primitives", test_scatter},
        {"primitives", test_random},
        {"fused", test_softmax},
        {"fused", test_layernorm},
        {"fused", test_cross_entropy},
        {"fused", test_attention},
        {"fused", test_matmul_bias},
        {"fused", test_adamw},
        {"fused", test_dropout},
    };
    TCase *tc = NULL;
    const char *current = "";
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(current, tests[i].group) != 0) {
            current = tests[i].group;
            tc = tcase_create(current); /* CK_RUN_CASE=<group> runs one group */
            tcase_set_timeout(tc, 600);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, tests[i].test);
    }
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* a forked child cannot use the GPU */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
