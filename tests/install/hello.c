/*
 * tests/install/hello.c - a program built against an installed awl
 * (tests/install/test_install.sh): a tensor op, then a tiny GPT's greedy
 * continuation with the key/value cache. Prints "hello awl" and the
 * tokens; exits 1 with awl's message on any error.
 */
#include <stdio.h>

#include "awl.h"

int main(void)
{
    awl_scope_begin();
    const float values[4] = {1, 2, 3, 4};
    awl_tensor *x = awl_from_data(values, AWL_SHAPE(2, 2), AWL_F32, "cpu");
    double sum = awl_item(awl_sum_all(awl_matmul(x, x))); /* [[7,10],[15,22]] */
    awl_gpt_config cfg = {.vocab = 8, .block = 8, .n_layer = 1, .n_head = 2, .n_embd = 8,
                          .batch = 1, .bias = true};
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 1);
    const int32_t prompt[2] = {1, 2}, *prompts[1] = {prompt};
    int32_t out[6], *outs[1] = {out};
    int n_prompt = 2, n_out = 0;
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = 4;
    o.temperature = 0.0;
    if (sum != 54.0 || !model || awl_gpt_generate(model, 1, prompts, &n_prompt, &o, outs, &n_out) < 0) {
        fprintf(stderr, "hello: sum %g (expected 54): %s\n", sum, awl_last_error());
        return 1;
    }
    printf("hello awl: sum %g, tokens", sum);
    for (int i = 0; i < n_out; i++) printf(" %d", out[i]);
    printf("\n");
    awl_gpt_free(model);
    awl_scope_end();
    return n_out == 6 ? 0 : 1;
}
