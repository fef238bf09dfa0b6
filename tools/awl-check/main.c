/*
 * tools/awl-check/main.c - the awl-check program: a backend's conformance,
 * speed and gradients, op by op.
 *
 *     awl-check --device student --progress   # where a new backend stands
 *     awl-check --device cpu --op unary.exp   # one op, every dtype and layout
 *     awl-check --device cuda --set attention=simt --op attention
 *     awl-check --device cuda --perf          # GB/s and GFLOP/s against the CPU
 *     awl-check --device student --grad       # float64 gradient checks on it
 *
 * awl_check.h says what is checked and what the lines mean;
 * docs/backend-guide.md how to use it while writing a backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "tools/awl-check/awl_check.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: awl-check [--device NAME] [--op OP] [--dtype T] [--seed N] [--progress]\n"
               "                 [--quiet] [--json] [--strict] [--set KEY=VALUE] [--tol-scale X]\n"
               "                 [--perf | --grad | --list]\n"
               "\n"
               "Checks a backend op by op against a float64 reference: every primitive over a\n"
               "grid of dtypes and layouts, every fused kernel against its composed version.\n"
               "One line per check: PASS, FAIL (with why), MISSING or UNSUPPORTED.\n"
               "\n"
               "  --device NAME   the device to check: cpu (default), cuda, cuda:1, student\n"
               "  --op OP         only OP: a kernel (unary, matmul, attention) or one op\n"
               "                  (unary.exp, binary.add, reduce.sum); --list shows the names\n"
               "  --dtype T       only float32, float64, int32 or bfloat16\n"
               "  --seed N        the inputs' seed (default 1): the same seed, the same inputs\n"
               "  --progress      one line per milestone, with counts, instead of per check\n"
               "  --quiet         only the lines that are not PASS\n"
               "  --json          every line a JSON object\n"
               "  --strict        a kernel declining (UNSUPPORTED) a case it declares fails\n"
               "  --set K=V       a backend setting first, e.g. attention=simt on cuda\n"
               "  --tol-scale X   multiply every tolerance (TF32 mode)\n"
               "  --perf          GB/s or GFLOP/s of each primitive, and the ratio to cpu\n"
               "  --grad          the float64 gradient checks of every differentiable op\n"
               "  --list          the checks that would run, and the device's kernels\n"
               "\n"
               "Exit status: 0 all passed, 1 something failed, 2 nothing failed but some\n"
               "required primitives are missing, 3 bad arguments, 77 no such device here.\n");
}

static int parse_dtype(const char *s)
{
    for (int d = 0; d < AWL_DTYPE_COUNT; d++)
        if (strcmp(s, awl_dtype_name((awl_dtype)d)) == 0) return d;
    return -2;
}

int main(int argc, char **argv)
{
    awl_check_options o = {.device = "cpu", .dtype = -1, .seed = 1};
    enum { CHECK, PERF, GRAD, LIST } mode = CHECK;
    const char *settings[16];
    int n_settings = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && more)
            o.device = argv[++i];
        else if (strcmp(a, "--op") == 0 && more)
            o.op = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && more) {
            o.dtype = parse_dtype(argv[++i]);
            if (o.dtype < -1) {
                fprintf(stderr, "awl-check: unknown dtype '%s'\n", argv[i]);
                return 3;
            }
        } else if (strcmp(a, "--seed") == 0 && more)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--tol-scale") == 0 && more)
            o.tol_scale = atof(argv[++i]);
        else if (strcmp(a, "--set") == 0 && more && n_settings < 16)
            settings[n_settings++] = argv[++i];
        else if (strcmp(a, "--progress") == 0)
            o.progress = true;
        else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0)
            o.quiet = true;
        else if (strcmp(a, "--json") == 0)
            o.json = true;
        else if (strcmp(a, "--strict") == 0)
            o.strict = true;
        else if (strcmp(a, "--perf") == 0)
            mode = PERF;
        else if (strcmp(a, "--grad") == 0)
            mode = GRAD;
        else if (strcmp(a, "--list") == 0)
            mode = LIST;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "awl-check: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 3;
        }
    }
    for (int i = 0; i < n_settings; i++) {
        char key[64];
        const char *eq = strchr(settings[i], '=');
        if (!eq || (size_t)(eq - settings[i]) >= sizeof key) {
            fprintf(stderr, "awl-check: --set wants KEY=VALUE, not '%s'\n", settings[i]);
            return 3;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - settings[i]), settings[i]);
        if (awl_device_available(o.device) && awl_device_set_option(o.device, key, eq + 1) < 0) {
            fprintf(stderr, "awl-check: %s\n", awl_last_error());
            return 3;
        }
    }
    switch (mode) {
    case PERF: return awl_check_perf(&o);
    case GRAD: return awl_check_grad(&o, NULL);
    case LIST: return awl_check_list(&o);
    default: return awl_check_run(&o, NULL);
    }
}
