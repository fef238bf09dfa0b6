/*
 * tests/test_errors.c - every class of bad input, and what the user reads.
 *
 * The error model (common/error.h): an op given bad input returns NULL (or a
 * negative status) and records a message naming the op and the shapes; an
 * op given a NULL input returns NULL without recording anything, so the
 * first failure of a chain is the one reported; AWL_ERR_* codes are part of
 * the API; and abort-on-error (awl_set_abort_on_error or the environment
 * variable AWL_ABORT_ON_ERROR) turns the first error into an abort that
 * prints the message. The last is tested in child processes: one forked,
 * one re-executed with the environment variable set.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/gradcheck.h"
#include "nn/nn.h"

/* Checks that `result` failed with exactly this message and code. */
#define ck_assert_error(result, code, message)                                                     \
    do {                                                                                           \
        awl_clear_error();                                                                         \
        ck_assert_msg(!(result), "expected a failure: %s", message);                               \
        ck_assert_str_eq(awl_last_error(), message);                                               \
        ck_assert_int_eq(awl_last_error_code(), code);                                             \
    } while (0)

/* Checks that `result` failed with a message that starts with prefix. */
#define ck_assert_error_prefix(result, prefix)                                                     \
    do {                                                                                           \
        awl_clear_error();                                                                         \
        ck_assert_msg(!(result), "expected a failure: %s", prefix);                                \
        ck_assert_msg(strncmp(awl_last_error(), prefix, strlen(prefix)) == 0,                      \
                      "message \"%s\" does not start with \"%s\"", awl_last_error(), prefix);      \
        ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);                                  \
    } while (0)

static awl_tensor *f32(int ndim, const int64_t *shape)
{
    return awl_gc_randn_dtype(ndim, shape, AWL_F32);
}

/* ---- shapes and dtypes of binary ops ------------------------------------------------------ */

typedef struct binary_op {
    const char *name;
    awl_tensor *(*op)(awl_tensor *, awl_tensor *);
} binary_op;

static const binary_op binary_ops[] = {
    {"awl_add", awl_add}, {"awl_sub", awl_sub},         {"awl_mul", awl_mul},
    {"awl_div", awl_div}, {"awl_maximum", awl_maximum}, {"awl_minimum", awl_minimum},
    {"awl_eq", awl_eq},   {"awl_gt", awl_gt},           {"awl_lt", awl_lt},
};
#define N_BINARY (int)(sizeof binary_ops / sizeof binary_ops[0])

START_TEST(test_binary_shape_mismatch)
{
    awl_gc_begin(70);
    awl_tensor *a = f32(AWL_SHAPE(2, 3)), *b = f32(AWL_SHAPE(4, 3));
    char want[128];
    for (int i = 0; i < N_BINARY; i++) {
        snprintf(want, sizeof want, "%s: shapes (2,3) and (4,3) cannot be broadcast",
                 binary_ops[i].name);
        ck_assert_error(binary_ops[i].op(a, b), AWL_ERR_INVALID, want);
    }
    ck_assert_error(awl_where(f32(AWL_SHAPE(5)), a, a), AWL_ERR_INVALID,
                    "awl_where: shapes (5) and (2,3) cannot be broadcast");
    ck_assert_error(awl_where(f32(AWL_SHAPE(3)), a, b), AWL_ERR_INVALID,
                    "awl_where: shapes (2,3) and (4,3) cannot be broadcast");
    ck_assert_error(awl_masked_fill(a, f32(AWL_SHAPE(4, 3)), 0.0), AWL_ERR_INVALID,
                    "awl_masked_fill: mask of shape (4,3) cannot be broadcast to (2,3)");
    /* broadcasting x up to the mask's shape is not masked_fill's job */
    ck_assert_error(awl_masked_fill(f32(AWL_SHAPE(3)), f32(AWL_SHAPE(2, 3)), 0.0), AWL_ERR_INVALID,
                    "awl_masked_fill: mask of shape (2,3) cannot be broadcast to (3)");
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_dtype_mismatch)
{
    awl_gc_begin(71);
    awl_tensor *a = f32(AWL_SHAPE(2, 3)), *b = awl_gc_randn(AWL_SHAPE(2, 3));
    char want[128];
    for (int i = 0; i < N_BINARY; i++) {
        snprintf(want, sizeof want, "%s: dtypes differ: float32 and float64", binary_ops[i].name);
        ck_assert_error(binary_ops[i].op(a, b), AWL_ERR_INVALID, want);
    }
    ck_assert_error(awl_matmul(a, awl_transpose(b, 0, 1)), AWL_ERR_INVALID,
                    "awl_matmul: dtypes differ: float32 and float64");
    ck_assert_error(awl_where(a, a, b), AWL_ERR_INVALID,
                    "awl_where: dtypes differ: float32 and float64");
    ck_assert_error(awl_concat(2, (awl_tensor *[]){a, b}, 0), AWL_ERR_INVALID,
                    "awl_concat: dtypes differ: float32 and float64");
    ck_assert_error(awl_stack(2, (awl_tensor *[]){a, b}, 0), AWL_ERR_INVALID,
                    "awl_stack: dtypes differ: float32 and float64");
    /* float-only ops on integers */
    awl_tensor *ints = awl_gc_randn_dtype(AWL_SHAPE(2, 3), AWL_I32);
    ck_assert_error_prefix(awl_exp(ints), "awl_exp: int32");
    ck_assert_error_prefix(awl_softmax(ints, -1), "awl_softmax: int32");
    ck_assert_error_prefix(awl_log_softmax(ints, -1), "awl_log_softmax: int32");
    ck_assert_error_prefix(awl_logsumexp(ints, -1, false), "awl_logsumexp: int32");
    ck_assert_error_prefix(awl_matmul(ints, awl_transpose(ints, 0, 1)), "awl_matmul: int32");
    ck_assert_error_prefix(awl_embedding(a, awl_gc_randn(AWL_SHAPE(2))),
                           "awl_embedding: indices must be int32");
    ck_assert_error_prefix(awl_requires_grad_(ints, true), "awl_requires_grad_: int32");
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- matmul, reshape, permute, slice and other shape errors ------------------------------- */

START_TEST(test_matmul_inner_dimensions)
{
    awl_gc_begin(72);
    ck_assert_error(awl_matmul(f32(AWL_SHAPE(4, 3)), f32(AWL_SHAPE(5, 2))), AWL_ERR_INVALID,
                    "awl_matmul: inner dimensions differ: (4,3) @ (5,2)");
    ck_assert_error(awl_matmul(f32(AWL_SHAPE(3)), f32(AWL_SHAPE(4))), AWL_ERR_INVALID,
                    "awl_matmul: inner dimensions differ: (3) @ (4)");
    ck_assert_error_prefix(awl_matmul(f32(AWL_SHAPE(2, 4, 3)), f32(AWL_SHAPE(3, 3, 2))),
                           "awl_matmul: ");
    ck_assert_error_prefix(awl_matmul(f32(0, (int64_t[]){0}), f32(AWL_SHAPE(3))),
                           "awl_matmul: operands need at least 1 dimension");
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_invalid_views)
{
    awl_gc_begin(73);
    awl_tensor *x = f32(AWL_SHAPE(2, 3)), *x3 = f32(AWL_SHAPE(2, 3, 4));
    ck_assert_error(awl_reshape(x, AWL_SHAPE(4, 2)), AWL_ERR_INVALID,
                    "awl_reshape: cannot reshape (2,3) (6 elements) to (4,2)");
    ck_assert_error(awl_reshape(x, AWL_SHAPE(4, -1)), AWL_ERR_INVALID,
                    "awl_reshape: cannot reshape (2,3) (6 elements) to (4,-1)");
    ck_assert_error_prefix(awl_reshape(x, AWL_SHAPE(-1, -1)), "awl_reshape: ");
    ck_assert_error_prefix(awl_flatten(x3, 2, 0), "awl_flatten: start_dim 2 comes after");
    ck_assert_error(awl_permute(x3, (int[]){0, 0, 1}), AWL_ERR_INVALID,
                    "awl_permute: (0,0,1) is not a permutation of the axes of (2,3,4)");
    ck_assert_error(awl_permute(x3, (int[]){0, 3, 1}), AWL_ERR_INVALID,
                    "awl_permute: (0,3,1) is not a permutation of the axes of (2,3,4)");
    ck_assert_error_prefix(awl_transpose(x, 0, 2), "awl_transpose: dim 2 out of range");
    ck_assert_error(awl_slice(x, 1, 0, 5, 1), AWL_ERR_INVALID,
                    "awl_slice: range 0:5 out of bounds for dim 1 of size 3 (shape (2,3))");
    ck_assert_error(awl_slice(x, 1, -4, 2, 1), AWL_ERR_INVALID,
                    "awl_slice: range -4:2 out of bounds for dim 1 of size 3 (shape (2,3))");
    ck_assert_error_prefix(awl_slice(x, 2, 0, 1, 1), "awl_slice: dim 2 out of range");
    ck_assert_error(awl_slice(x, 0, 0, 1, 0), AWL_ERR_INVALID,
                    "awl_slice: step must be positive, got 0");
    ck_assert_error(awl_expand(x, AWL_SHAPE(4, 3)), AWL_ERR_INVALID,
                    "awl_expand: cannot expand (2,3) to (4,3)");
    ck_assert_error(awl_expand(x, AWL_SHAPE(3)), AWL_ERR_INVALID,
                    "awl_expand: cannot expand (2,3) to (3)");
    ck_assert_error(awl_squeeze(x, 1), AWL_ERR_INVALID,
                    "awl_squeeze: dim 1 of (2,3) has size 3, not 1");
    ck_assert_error_prefix(awl_unsqueeze(x, 4), "awl_unsqueeze: dim 4 out of range");
    ck_assert_error_prefix(awl_sum(x, AWL_DIMS(2), false), "awl_sum: dim 2 out of range");
    ck_assert_error_prefix(awl_max(x, AWL_DIMS(0, 0), false), "awl_max: dim 0 listed twice");
    ck_assert_error_prefix(awl_softmax(x, 2), "awl_softmax: dim 2 out of range");
    ck_assert_error_prefix(awl_concat(2, (awl_tensor *[]){x, f32(AWL_SHAPE(3, 3))}, 1),
                           "awl_concat: tensor 1 has shape (3,3)");
    ck_assert_error(awl_stack(2, (awl_tensor *[]){x, f32(AWL_SHAPE(3, 2))}, 0), AWL_ERR_INVALID,
                    "awl_stack: tensor 1 has shape (3,2), tensor 0 has (2,3)");
    awl_tensor *pieces[2];
    awl_clear_error();
    ck_assert_int_eq(awl_split(x, 1, 1, pieces, 2), AWL_ERR_INVALID);
    ck_assert_str_eq(awl_last_error(), "awl_split: 3 pieces needed, room for 2");
    ck_assert(awl_gc_end());
}
END_TEST

/* An index out of range fails the op, or, where the backend checks indices
 * on the device (CUDA), the next synchronisation, with the same message;
 * the one after that is clean again. */
#define ck_assert_index_error(result, message)                                                     \
    do {                                                                                           \
        awl_clear_error();                                                                         \
        if ((result)) ck_assert_int_eq(awl_synchronize(awl_gc_device()), AWL_ERR_INVALID);         \
        ck_assert_str_eq(awl_last_error(), message);                                               \
        ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);                                  \
        ck_assert_int_eq(awl_synchronize(awl_gc_device()), AWL_OK);                                \
    } while (0)

START_TEST(test_index_out_of_range)
{
    awl_gc_begin(74);
    awl_tensor *w = f32(AWL_SHAPE(65, 4));
    const double ids[3] = {3, 70, 1};
    awl_tensor *idx = awl_gc_from_doubles(ids, AWL_SHAPE(3), AWL_I32);
    ck_assert_index_error(awl_embedding(w, idx),
                          "awl_embedding: index 70 out of range for 65 rows");
    const double neg[3] = {0, -1, 2};
    ck_assert_index_error(awl_embedding(w, awl_gc_from_doubles(neg, AWL_SHAPE(3), AWL_I32)),
                          "awl_embedding: index -1 out of range for 65 rows");
    awl_tensor *x = f32(AWL_SHAPE(2, 3));
    const double g[2] = {1, 3};
    ck_assert_index_error(awl_gather(x, 1, awl_gc_from_doubles(g, AWL_SHAPE(2, 1), AWL_I32)),
                          "awl_gather: index 3 out of range for 3 entries");
    /* a cross-entropy target: on the device, with the targets left there
     * (the loss's row is NaN until then); ignore_index is no such index */
    awl_tensor *logits = f32(AWL_SHAPE(3, 3));
    const double bad[3] = {0, 3, 1}, ignored[3] = {0, -100, 1};
    ck_assert_index_error(
        awl_cross_entropy(logits, awl_gc_from_doubles(bad, AWL_SHAPE(3), AWL_I32), -100),
        "awl_cross_entropy: index 3 out of range for 3 classes");
    awl_tensor *loss =
        awl_cross_entropy(logits, awl_gc_from_doubles(ignored, AWL_SHAPE(3), AWL_I32), -100);
    ck_assert_ptr_nonnull(loss);
    ck_assert(isfinite(awl_item(loss)));
    ck_assert_int_eq(awl_synchronize(awl_gc_device()), AWL_OK);
    /* in range after all that: the right rows */
    const double ok[2] = {64, 0};
    double *rows = awl_gc_values(awl_embedding(w, awl_gc_from_doubles(ok, AWL_SHAPE(2), AWL_I32)));
    double *wv = awl_gc_values(w);
    ck_assert(awl_gc_allclose(rows, wv + 64 * 4, 4, 0, 0, "row 64"));
    ck_assert(awl_gc_allclose(rows + 4, wv, 4, 0, 0, "row 0"));
    free(rows);
    free(wv);
    ck_assert_error_prefix(awl_gather(x, 1, awl_gc_from_doubles(g, AWL_SHAPE(1, 2), AWL_I32)),
                           "awl_gather: indices (1,2) do not match (2,3)");
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- backward ------------------------------------------------------------------------------- */

START_TEST(test_backward_errors)
{
    awl_gc_begin(75);
    awl_tensor *x = awl_requires_grad_(f32(AWL_SHAPE(2, 3)), true);
    awl_tensor *y = awl_tanh(x);
    awl_clear_error();
    ck_assert_int_eq(awl_backward(y), AWL_ERR_INVALID);
    ck_assert_str_eq(awl_last_error(), "awl_backward: a gradient can be implied only for a "
                                       "scalar; this tensor has shape (2,3), so pass options.grad");
    ck_assert(x->grad == NULL);
    /* with a gradient of the wrong shape */
    awl_backward_options o = {.grad = f32(AWL_SHAPE(3, 2))};
    ck_assert_int_eq(awl_backward_ex(y, &o), AWL_ERR_INVALID);
    ck_assert_str_eq(awl_last_error(),
                     "awl_backward: gradient of shape (3,2) for a tensor of shape (2,3)");
    /* with the right one it works */
    o.grad = awl_ones_like(y);
    ck_assert_int_eq(awl_backward_ex(y, &o), 0);
    ck_assert_ptr_nonnull(x->grad);
    awl_clear_grad(x);
    /* from a tensor that does not require grad */
    awl_clear_error();
    ck_assert_int_eq(awl_backward(awl_sum_all(f32(AWL_SHAPE(2)))), AWL_ERR_INVALID);
    ck_assert(strstr(awl_last_error(), "does not require grad") != NULL);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- NULL propagation ------------------------------------------------------------------------ */

START_TEST(test_null_propagates_silently)
{
    awl_gc_begin(76);
    awl_tensor *x = awl_requires_grad_(f32(AWL_SHAPE(4, 3)), true);
    /* the first failure of a chain is the one reported */
    awl_clear_error();
    awl_tensor *h = awl_matmul(x, f32(AWL_SHAPE(5, 2)));
    unsigned long count = awl_error_count();
    awl_tensor *y = awl_mean_all(awl_softmax(awl_relu(awl_add(awl_mul_scalar(h, 2.0), x)), -1));
    ck_assert_ptr_null(y);
    ck_assert_int_eq(awl_backward(y), AWL_ERR_INVALID);
    ck_assert_str_eq(awl_last_error(), "awl_matmul: inner dimensions differ: (4,3) @ (5,2)");
    ck_assert_uint_eq(awl_error_count(), count);

    /* every op, one NULL argument at a time */
    awl_tensor *n = NULL, *idx = awl_gc_from_doubles((double[]){0}, AWL_SHAPE(1, 1), AWL_I32);
    awl_tensor *results[] = {awl_add(n, x),
                             awl_add(x, n),
                             awl_sub(n, x),
                             awl_mul(x, n),
                             awl_div(n, x),
                             awl_maximum(n, x),
                             awl_minimum(x, n),
                             awl_add_scalar(n, 1),
                             awl_sub_scalar(n, 1),
                             awl_rsub_scalar(1, n),
                             awl_mul_scalar(n, 1),
                             awl_div_scalar(n, 1),
                             awl_rdiv_scalar(1, n),
                             awl_pow(n, 2),
                             awl_neg(n),
                             awl_exp(n),
                             awl_log(n),
                             awl_sqrt(n),
                             awl_tanh(n),
                             awl_sigmoid(n),
                             awl_relu(n),
                             awl_gelu(n),
                             awl_abs(n),
                             awl_where(n, x, x),
                             awl_where(x, n, x),
                             awl_where(x, x, n),
                             awl_masked_fill(n, x, 0),
                             awl_masked_fill(x, n, 0),
                             awl_eq(n, x),
                             awl_gt(x, n),
                             awl_lt(n, x),
                             awl_matmul(n, x),
                             awl_matmul(x, n),
                             awl_sum(n, 0, NULL, false),
                             awl_mean(n, 0, NULL, false),
                             awl_max(n, 0, NULL, false),
                             awl_sum_all(n),
                             awl_mean_all(n),
                             awl_softmax(n, -1),
                             awl_log_softmax(n, -1),
                             awl_logsumexp(n, -1, false),
                             awl_reshape(n, AWL_SHAPE(12)),
                             awl_flatten(n, 0, -1),
                             awl_permute(n, (int[]){1, 0}),
                             awl_transpose(n, 0, 1),
                             awl_expand(n, AWL_SHAPE(4, 3)),
                             awl_slice(n, 0, 0, 1, 1),
                             awl_squeeze(n, 0),
                             awl_unsqueeze(n, 0),
                             awl_contiguous(n),
                             awl_clone(n),
                             awl_concat(2, (awl_tensor *[]){x, n}, 0),
                             awl_stack(2, (awl_tensor *[]){n, x}, 0),
                             awl_embedding(n, idx),
                             awl_embedding(x, n),
                             awl_gather(n, 0, idx),
                             awl_gather(x, 0, n),
                             awl_cast(n, AWL_F64),
                             awl_to(n, "cpu")};
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++)
        ck_assert_msg(results[i] == NULL, "op %zu returned a tensor for a NULL input", i);
    awl_tensor *pieces[2];
    ck_assert_int_lt(awl_split(n, 1, 0, pieces, 2), 0);
    ck_assert_uint_eq(awl_error_count(), count);
    ck_assert_str_eq(awl_last_error(), "awl_matmul: inner dimensions differ: (4,3) @ (5,2)");
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- abort on error ----------------------------------------------------------------------------
 */

#define ABORT_MESSAGE "awl_matmul: inner dimensions differ: (4,3) @ (5,2)"

/* What the child does: one bad op, which must not return. On the CPU
 * whatever the test device: a forked child cannot use a GPU its parent
 * initialised, and the check that aborts runs before any kernel. */
static int bad_op_then_exit(void)
{
    awl_scope_begin();
    awl_matmul(awl_zeros(AWL_SHAPE(4, 3), AWL_F32, "cpu"),
               awl_zeros(AWL_SHAPE(5, 2), AWL_F32, "cpu"));
    awl_scope_end();
    return 0; /* reaching this means no abort */
}

/* Runs child() in a process whose stderr comes back in buf; returns its
 * wait status. When via_env, the child re-executes this program with
 * AWL_ABORT_ON_ERROR=1 instead of calling the API. */
static int run_child(bool via_env, char *buf, size_t size)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (via_env) {
            setenv("AWL_ABORT_ON_ERROR", "1", 1);
            setenv("CK_FORK", "no", 1);
            execl("/proc/self/exe", "test_errors", "--bad-op", (char *)NULL);
            _exit(99);
        }
        awl_set_abort_on_error(true);
        _exit(bad_op_then_exit());
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t got;
    while (used + 1 < size && (got = read(fds[0], buf + used, size - 1 - used)) > 0)
        used += (size_t)got;
    buf[used] = '\0';
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

START_TEST(test_abort_on_error)
{
    for (int via_env = 0; via_env < 2; via_env++) {
        char out[4096];
        int status = run_child(via_env, out, sizeof out);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
                      "child (via_env=%d) did not abort: status %d, stderr: %s", via_env, status,
                      out);
        ck_assert_msg(strstr(out, ABORT_MESSAGE) != NULL, "stderr lacks the message: %s", out);
    }
    /* and this process was not switched: errors still return */
    awl_gc_begin(77);
    ck_assert_ptr_null(awl_matmul(f32(AWL_SHAPE(4, 3)), f32(AWL_SHAPE(5, 2))));
    ck_assert_str_eq(awl_last_error(), ABORT_MESSAGE);
    ck_assert(awl_gc_end());
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bad-op") == 0) return bad_op_then_exit();
    return AWL_GC_RUN_SUITE("errors", test_binary_shape_mismatch, test_dtype_mismatch,
                            test_matmul_inner_dimensions, test_invalid_views,
                            test_index_out_of_range, test_backward_errors,
                            test_null_propagates_silently, test_abort_on_error);
}
