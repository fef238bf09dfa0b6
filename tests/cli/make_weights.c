/*
 * tests/cli/make_weights.c - files the CLI tests need that train_gpt does
 * not write itself.
 *
 *   make_weights torch SRC DST F32|BF16|F16 [head] [untied] [mask] [compiled]
 *       SRC's weights as PyTorch writes a nanoGPT state_dict with
 *       safetensors: no awl metadata, no CRCs, the chosen dtype; "head"
 *       adds lm_head.weight (the tied head, as state_dict lists it),
 *       "untied" makes it differ from the embedding, "mask" adds the causal
 *       mask buffers of older nanoGPT versions, "compiled" prefixes every
 *       name with torch.compile's "_orig_mod.".
 *   make_weights restep SRC DST STEP
 *       SRC with its step set to STEP (a valid checkpoint otherwise, CRCs
 *       and all): for steps no run reaches.
 *
 * The safetensors file is written here byte by byte, as another tool would,
 * so the test does not lean on awl's own writer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); /* round to nearest even */
}

static uint16_t to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000;
    int exp = (int)((b >> 23) & 0xff) - 127 + 15;
    uint32_t mant = b & 0x7fffff;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp), half = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | (uint32_t)exp << 10 | mant >> 13, rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

typedef struct entry {
    char name[160];
    int ndim;
    int64_t shape[8];
    float *values;
    int64_t n;
} entry;

static int die(const char *what)
{
    fprintf(stderr, "make_weights: %s: %s\n", what, awl_last_error());
    return 1;
}

static int write_torch(const char *src, const char *dst, const char *dtype, bool head, bool untied,
                       bool mask, bool compiled)
{
    awl_safetensors *f = awl_safetensors_open(src);
    if (!f) return die(src);
    entry *e = calloc((size_t)awl_safetensors_count(f) + 8, sizeof *e);
    int n = 0, block = 0, n_layer = 0;
    for (int i = 0; i < awl_safetensors_count(f); i++) {
        awl_safetensors_info info;
        awl_safetensors_info_at(f, i, &info);
        if (strncmp(info.name, "optimizer.", 10) == 0) continue;
        awl_scope_begin();
        awl_tensor *t = awl_tensor_cast(awl_safetensors_load(f, i, "cpu"), AWL_F32);
        snprintf(e[n].name, sizeof e[n].name, "%s%s", compiled ? "_orig_mod." : "", info.name);
        e[n].ndim = info.ndim;
        memcpy(e[n].shape, info.shape, sizeof e[n].shape);
        e[n].n = awl_numel(t);
        e[n].values = malloc((size_t)e[n].n * 4 + 4);
        awl_to_host(t, e[n].values, (size_t)e[n].n * 4);
        awl_scope_end();
        if (strcmp(info.name, "transformer.wpe.weight") == 0) block = (int)info.shape[0];
        if (strstr(info.name, ".ln_1.weight")) n_layer++;
        if (head && strcmp(info.name, "transformer.wte.weight") == 0) {
            entry *h = &e[n + 1];
            *h = e[n];
            snprintf(h->name, sizeof h->name, "%slm_head.weight", compiled ? "_orig_mod." : "");
            h->values = malloc((size_t)h->n * 4 + 4);
            memcpy(h->values, e[n].values, (size_t)h->n * 4);
            if (untied) h->values[0] += 1.0f;
            n++;
        }
        n++;
    }
    awl_safetensors_close(f);
    for (int l = 0; mask && l < n_layer; l++) {
        entry *m = &e[n++];
        snprintf(m->name, sizeof m->name, "%stransformer.h.%d.attn.bias",
                 compiled ? "_orig_mod." : "", l);
        m->ndim = 4;
        int64_t shape[4] = {1, 1, block, block};
        memcpy(m->shape, shape, sizeof shape);
        m->n = (int64_t)block * block;
        m->values = malloc((size_t)m->n * 4);
        for (int64_t k = 0; k < m->n; k++) m->values[k] = (k % block) <= (k / block) ? 1.0f : 0.0f;
    }
    size_t elem = strcmp(dtype, "F32") == 0 ? 4 : 2;
    char *header = malloc(1 << 20);
    size_t len = (size_t)sprintf(header, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        len += (size_t)sprintf(header + len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name,
                               dtype);
        for (int d = 0; d < e[i].ndim; d++)
            len += (size_t)sprintf(header + len, d ? ",%lld" : "%lld", (long long)e[i].shape[d]);
        uint64_t bytes = (uint64_t)e[i].n * elem;
        len += (size_t)sprintf(header + len, "],\"data_offsets\":[%llu,%llu]}",
                               (unsigned long long)offset, (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    header[len++] = '}';
    while ((8 + len) % 8) header[len++] = ' ';
    FILE *out = fopen(dst, "wb");
    if (!out) return die(dst);
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)len >> (8 * k));
    fwrite(le, 1, 8, out);
    fwrite(header, 1, len, out);
    for (int i = 0; i < n; i++) {
        for (int64_t k = 0; k < e[i].n; k++) {
            float v = e[i].values[k];
            if (elem == 4) {
                fwrite(&v, 4, 1, out);
            } else {
                uint16_t h = strcmp(dtype, "BF16") == 0 ? to_bf16(v) : to_f16(v);
                fwrite(&h, 2, 1, out);
            }
        }
        free(e[i].values);
    }
    fclose(out);
    free(header);
    free(e);
    return 0;
}

static int restep(const char *src, const char *dst, long long step)
{
    awl_safetensors *f = awl_safetensors_open(src);
    awl_train_state st = {0};
    if (!f || awl_checkpoint_read_state(f, &st) < 0) return die(src);
    awl_safetensors_close(f);
    awl_gpt_config cfg;
    if (awl_gpt_config_from_json(st.config_json, &cfg) < 0) return die("config");
    awl_train_state_clear(&st);
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 1);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    if (awl_checkpoint_load(src, awl_gpt_parameters(model), opt, &st) < 0) return die(src);
    st.step = step;
    int status = awl_checkpoint_save(dst, awl_gpt_parameters(model), opt, &st);
    awl_train_state_clear(&st);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
    return status < 0 ? die(dst) : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "torch") == 0) {
        bool flags[4] = {false};
        const char *names[4] = {"head", "untied", "mask", "compiled"};
        for (int i = 5; i < argc; i++)
            for (int k = 0; k < 4; k++)
                if (strcmp(argv[i], names[k]) == 0) flags[k] = true;
        return write_torch(argv[2], argv[3], argv[4], flags[0] || flags[1], flags[1], flags[2],
                           flags[3]);
    }
    if (argc == 5 && strcmp(argv[1], "restep") == 0)
        return restep(argv[2], argv[3], strtoll(argv[4], NULL, 10));
    fprintf(stderr, "usage: make_weights torch SRC DST F32|BF16|F16 [head] [untied] [mask] "
                    "[compiled] | restep SRC DST STEP\n");
    return 2;
}
