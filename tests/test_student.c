/*
 * tests/test_student.c - the student backend (backends/student), in the
 * two states the kit is handed out in.
 *
 * The skeleton (the default build): memory and host copies work, and every
 * compute primitive answers AWL_ERR_NOT_IMPLEMENTED with a message naming
 * the primitive, its milestone and the file to write it in; awl-check
 * reports every one of them missing and nothing else; a device probe
 * (what train_gpt asks before it starts) lists all twelve.
 *
 * The solution (cmake -DAWL_STUDENT_SOLUTION=ON, which `make test` builds
 * in build-student): awl-check passes, strict, and cpu-small trains on the
 * student device with the framework's composed kernels, in lockstep with
 * the CPU backend from the same initialisation and the same batches: the
 * two losses agree at every step within LOSS_TOL.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "tools/awl-check/awl_check.h"

/* How far apart the two devices' losses may be at any step: the student
 * backend sums in double with plain loops and composes every fused kernel,
 * the CPU backend uses OpenBLAS and its fused float32 kernels, so their
 * float32 results differ in the last bits (ten steps differ by at most
 * about 1e-6; the test prints the largest difference it saw). */
#define LOSS_TOL 1e-4
#define STEPS 10

static const awl_backend *student;

#ifndef AWL_STUDENT_SOLUTION

/* ---- the skeleton -------------------------------------------------------------------- */

START_TEST(test_memory_works)
{
    char src[100], back[100];
    for (int i = 0; i < 100; i++) src[i] = (char)(3 * i);
    void *p = student->alloc(0, sizeof src);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(student->copy_from_host(0, p, src, sizeof src), AWL_OK);
    ck_assert_int_eq(student->copy_to_host(0, back, p, sizeof back), AWL_OK);
    ck_assert_mem_eq(src, back, sizeof src);
    ck_assert_int_eq(student->synchronize(0), AWL_OK);
    student->free(0, p, sizeof src);
    /* a tensor can be made and read back; filling it is milestone 1 */
    awl_scope_begin();
    float v[3] = {1, 2, 3}, w[3];
    awl_tensor *t = awl_from_data(v, AWL_SHAPE(3), AWL_F32, "student");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(awl_to_host(t, w, sizeof w), AWL_OK);
    ck_assert_mem_eq(v, w, sizeof v);
    awl_clear_error();
    ck_assert_ptr_null(awl_zeros(AWL_SHAPE(3), AWL_F32, "student"));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_NOT_IMPLEMENTED);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "fill is not implemented yet"));
    awl_scope_end();
}
END_TEST

/* Each stub names its primitive, milestone and file. */
START_TEST(test_stub_messages)
{
    awl_view v;
    memset(&v, 0, sizeof v);
    v.dtype = AWL_F32;
    v.ndim = 1; /* no elements: nothing is read */
    const struct {
        const char *name, *file;
        int milestone, status;
    } stubs[] = {
        {"fill", "student_copy.c", 1, student->fill(&v, 0)},
        {"copy", "student_copy.c", 1, student->copy(&v, &v)},
        {"unary", "student_elementwise.c", 2, student->unary(AWL_UNARY_NEG, &v, &v, 0)},
        {"binary", "student_elementwise.c", 2, student->binary(AWL_BINARY_ADD, &v, &v, &v)},
        {"where", "student_elementwise.c", 3, student->where(&v, &v, &v, &v)},
        {"reduce", "student_reduce.c", 4, student->reduce(AWL_REDUCE_SUM, &v, &v)},
        {"matmul", "student_matmul.c", 5, student->matmul(&v, &v, &v, false)},
        {"index_select", "student_index.c", 6, student->index_select(&v, &v, &v)},
        {"index_add", "student_index.c", 6, student->index_add(&v, &v, &v)},
        {"gather", "student_index.c", 6, student->gather(&v, &v, 0, &v)},
        {"scatter_add", "student_index.c", 6, student->scatter_add(&v, 0, &v, &v)},
        {"random", "student_random.c", 7, student->random(&v, AWL_RANDOM_UNIFORM, 1, 0, 0, 1)},
    };
    for (size_t i = 0; i < sizeof stubs / sizeof stubs[0]; i++) {
        ck_assert_int_eq(stubs[i].status, AWL_ERR_NOT_IMPLEMENTED);
        awl_clear_error();
    }
    /* the message of each, made again one at a time */
    char want[256];
    awl_clear_error();
    student->matmul(&v, &v, &v, false);
    snprintf(want, sizeof want,
             "student backend: matmul is not implemented yet (milestone 5: %s); write it in "
             "backends/student/student_matmul.c",
             awl_milestone_title(5));
    ck_assert_str_eq(awl_last_error(), want);
    /* and the probe train_gpt asks lists them all */
    char report[2048];
    ck_assert_int_eq(awl_device_missing_primitives("student", report, sizeof report), 12);
    for (size_t i = 0; i < sizeof stubs / sizeof stubs[0]; i++) {
        char line[160];
        snprintf(line, sizeof line, "  %s (milestone %d: %s)\n", stubs[i].name, stubs[i].milestone,
                 awl_milestone_title(stubs[i].milestone));
        ck_assert_msg(strstr(report, line) != NULL, "no line \"%s\" in\n%s", line, report);
    }
}
END_TEST

/* awl-check: every check of every primitive missing, nothing failed or
 * passed, all seven milestones to do. */
START_TEST(test_every_primitive_missing)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    awl_check_options o = {.device = "student", .dtype = -1, .progress = true, .out = f};
    awl_check_counts c = {0, 0, 0, 0};
    int status = awl_check_run(&o, &c);
    fclose(f);
    printf("%s", text);
    ck_assert_int_eq(status, AWL_CHECK_MISSING);
    ck_assert_int_eq(c.passed, 0);
    ck_assert_int_eq(c.failed, 0);
    ck_assert_int_gt(c.missing, 1000);
    for (int m = 1; m <= AWL_MILESTONE_COUNT; m++) {
        char line[96];
        snprintf(line, sizeof line, "milestone %d  %s", m, awl_milestone_title(m));
        char *at = strstr(text, line);
        ck_assert_msg(at && strstr(at, "[todo]") && strstr(at, "[todo]") < strchr(at, '\n'),
                      "milestone %d is not all to do:\n%s", m, text);
    }
    for (int k = 0; k < AWL_KERNEL_COUNT; k++) {
        const awl_kernel_info *info = awl_kernel_get_info((awl_kernel)k);
        if (!info->milestone) continue;
        char line[96];
        snprintf(line, sizeof line, "MISSING %s: ", info->name);
        ck_assert_msg(strstr(text, line) != NULL, "no \"%s\" in\n%s", line, text);
    }
    free(text);
}
END_TEST

#else

/* ---- the solution ----------------------------------------------------------------------- */

START_TEST(test_solution_conforms)
{
    ck_assert_int_eq(awl_device_missing_primitives("student", NULL, 0), 0);
    awl_check_options o = {.device = "student", .dtype = -1, .quiet = true, .strict = true};
    awl_check_counts c = {0, 0, 0, 0};
    ck_assert_int_eq(awl_check_run(&o, &c), AWL_CHECK_OK);
    ck_assert_int_gt(c.passed, 1000);
}
END_TEST

/* A corpus with structure to learn: words from a small vocabulary. */
static int32_t *make_tokens(int64_t n)
{
    static const char *const words[] = {"the ",    "king ", "and ", "queen ",  "of ",
                                        "hearts ", "said ", "to ",  "ROMEO: ", "\n"};
    int32_t *t = malloc((size_t)n * sizeof *t);
    uint64_t s = 7;
    for (int64_t i = 0; i < n;) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        for (const char *w = words[(s >> 33) % 10]; *w && i < n; w++)
            t[i++] = (unsigned char)*w % 65;
    }
    return t;
}

typedef struct run {
    awl_gpt *model;
    awl_optimizer *opt;
    const char *device;
} run;

static void run_new(run *r, const awl_gpt_config *cfg, const char *device)
{
    r->device = device;
    r->model = awl_gpt_new(cfg, device, 1337);
    ck_assert_msg(r->model != NULL, "%s", awl_last_error());
    r->opt = awl_adamw_new(awl_gpt_parameters(r->model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_ptr_nonnull(r->opt);
}

/* One step on the batch (x, y) made on the CPU; the loss. Called outside
 * every scope, so the kept loss is this function's to release. */
static double run_step(run *r, awl_tensor *x, awl_tensor *y)
{
    awl_scope_begin();
    awl_tensor *loss = awl_keep(awl_gpt_loss(r->model, awl_tensor_to_device(x, r->device),
                                             awl_tensor_to_device(y, r->device)));
    awl_scope_end();
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s: %s", r->device, awl_last_error());
    awl_clip_grad_norm(awl_gpt_parameters(r->model), 1.0);
    ck_assert_int_eq(awl_optimizer_step(r->opt), 0);
    ck_assert_int_eq(awl_optimizer_zero_grad(r->opt), 0);
    double value = awl_item(loss);
    awl_release(loss);
    return value;
}

START_TEST(test_solution_trains)
{
    awl_gpt_config cfg;
    ck_assert_int_eq(awl_gpt_config_named("cpu-small", &cfg), 0);
    run cpu, st;
    run_new(&cpu, &cfg, "cpu");
    run_new(&st, &cfg, "student");
    const int64_t n = 20000, B = cfg.batch, T = cfg.block;
    int32_t *tokens = make_tokens(n), *xs = malloc((size_t)(B * T) * 4),
            *ys = malloc((size_t)(B * T) * 4);
    double worst = 0, first = 0, last = 0;
    uint64_t s = 99;
    for (int step = 0; step < STEPS; step++) {
        for (int64_t b = 0; b < B; b++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int64_t at = (int64_t)((s >> 33) % (uint64_t)(n - T - 1));
            for (int64_t t = 0; t < T; t++) {
                xs[b * T + t] = tokens[at + t];
                ys[b * T + t] = tokens[at + t + 1];
            }
        }
        /* outside every scope: this function owns x and y */
        awl_tensor *x = awl_from_data(xs, AWL_SHAPE(B, T), AWL_I32, "cpu");
        awl_tensor *y = awl_from_data(ys, AWL_SHAPE(B, T), AWL_I32, "cpu");
        double lc = run_step(&cpu, x, y), ls = run_step(&st, x, y);
        awl_release(x);
        awl_release(y);
        printf("step %2d: loss cpu %.6f, student %.6f, difference %.2e\n", step + 1, lc, ls,
               fabs(lc - ls));
        ck_assert_msg(fabs(lc - ls) <= LOSS_TOL, "step %d: cpu %.6f, student %.6f", step + 1, lc,
                      ls);
        if (fabs(lc - ls) > worst) worst = fabs(lc - ls);
        if (step == 0) first = ls;
        last = ls;
    }
    printf("test_student: %d steps of cpu-small in lockstep, largest loss difference %.2e "
           "(tolerance %.0e)\n",
           STEPS, worst, LOSS_TOL);
    ck_assert_msg(last < first, "the loss did not fall: %.4f -> %.4f", first, last);
    free(tokens);
    free(xs);
    free(ys);
    awl_optimizer_free(cpu.opt);
    awl_optimizer_free(st.opt);
    awl_gpt_free(cpu.model);
    awl_gpt_free(st.model);
}
END_TEST

#endif

int main(void)
{
    student = awl_student_backend();
    if (!student) {
        printf("test_student: skipped: awl was built without the student backend "
               "(AWL_WITH_STUDENT=OFF)\n");
        return 0;
    }
    Suite *s = suite_create("student");
    TCase *tc = tcase_create("student");
    tcase_set_timeout(tc, 600);
#ifndef AWL_STUDENT_SOLUTION
    tcase_add_test(tc, test_memory_works);
    tcase_add_test(tc, test_stub_messages);
    tcase_add_test(tc, test_every_primitive_missing);
#else
    tcase_add_test(tc, test_solution_conforms);
    tcase_add_test(tc, test_solution_trains);
#endif
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
