"""bench/torch_generate.py - the PyTorch peer of bench/bench_generate.c.

    python bench/torch_generate.py                                  # CPU, the three configurations
    python bench/torch_generate.py --configs gpt2-124m --new 64 --rounds 2
    python bench/torch_generate.py --device cuda --precision bf16

The same nanoGPT model (learned positions, pre-LayerNorm with bias, GELU
(tanh) MLP, tied head), randomly initialised, in eager mode under
torch.inference_mode, with a key/value cache of its own: one preallocated
(B, H, block, D) key and value tensor per layer, the prompt run at once
(causal scaled_dot_product_attention), then one token a step attending to
every cached key. Mode "recompute" runs the whole context every step, as
nanoGPT's sample does. Greedy; each step's tokens are copied to the host
(a generation loop prints them), as awl's sampler reads its logits there.

Timing and output fields are bench_generate's: prefill_tokens_per_s,
decode_tokens_per_s (batch * (new - 1) over the time from the first new
token to the last), ms_per_token, and decode_speedup on cache lines; the
median of --rounds rounds, the modes alternating within a round.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

CONFIGS = {  # vocab, block, layers, heads, embd (docs: the reference configurations)
    "cpu-small": (65, 64, 4, 4, 128),
    "cpu-medium": (65, 128, 6, 6, 192),
    "shakespeare-char": (65, 256, 6, 6, 384),
    "gpt2-124m": (50304, 1024, 12, 12, 768),
}


class Block(torch.nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)
        self.attn_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp_proj = torch.nn.Linear(4 * C, C)

    def attention(self, x, cache, start):
        """x (B, T, C) at positions start .. start+T-1; cache None or (k, v),
        each (B, H, block, D), which receives this x's keys and values."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            ck, cv = cache
            ck[:, :, start : start + T] = k
            cv[:, :, start : start + T] = v
            k, v = ck[:, :, : start + T], cv[:, :, : start + T]
            # a prompt into an empty cache is causal; one new token sees every key
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, cache=None, start=0):
        x = x + self.attention(self.ln_1(x), cache, start)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V, block, L, H, C):
        super().__init__()
        self.block = block
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(block, C)
        self.blocks = torch.nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx, caches=None, start=0):
        """Logits after the last token of idx (B, T) at positions start...; the
        head runs for that position only."""
        T = idx.shape[1]
        pos = torch.arange(start, start + T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for i, b in enumerate(self.blocks):
            x = b(x, caches[i] if caches else None, start)
        return self.ln_f(x[:, -1]) @ self.wte.weight.t()  # tied head


def generate(model, prompt, new, use_cache, dtype):
    """Greedy: the times at which the first and the last new tokens were ready."""
    B, P = prompt.shape
    out, caches = prompt, None
    if use_cache:
        L, H = len(model.blocks), model.blocks[0].H
        C = model.wte.weight.shape[1]
        shape = (B, H, model.block, C // H)
        caches = [
            (torch.zeros(shape, device=prompt.device, dtype=dtype),
             torch.zeros(shape, device=prompt.device, dtype=dtype))
            for _ in range(L)
        ]
    marks = []
    logits = model(prompt, caches, 0)
    for step in range(new):
        nxt = logits.argmax(dim=-1, keepdim=True)
        nxt.tolist()  # on the host, as a printing loop has it
        marks.append(time.perf_counter())
        out = torch.cat([out, nxt], dim=1)
        if step == new - 1:
            break
        if use_cache:
            logits = model(nxt, caches, P + step)
        else:
            logits = model(out, None, 0)
    return marks


def run_config(args, name):
    V, block, L, H, C = CONFIGS[name]
    P = min(args.prompt, block - 1)
    N = min(args.new, block - P)
    torch.manual_seed(1)
    device = torch.device(args.device)
    model = GPT(V, block, L, H, C).to(device).eval()
    dtype = torch.float32
    autocast = args.precision == "bf16"
    if autocast:
        dtype = torch.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    prompt = torch.randint(0, V, (args.batch, P), device=device)
    times = {True: ([], []), False: ([], [])}
    modes = [m for m in (True, False) if ("cache" if m else "recompute") in args.modes]
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16,
                                                enabled=autocast):
        generate(model, prompt, 2, True, dtype)  # warm-up
        for r in range(args.rounds):
            for k in range(2):
                use_cache = (r + k) % 2 == 0
                if use_cache not in modes:
                    continue
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                marks = generate(model, prompt, N, use_cache, dtype)
                times[use_cache][0].append(marks[0] - start)
                times[use_cache][1].append(marks[-1] - marks[0])
    rate = {m: args.batch * (N - 1) / statistics.median(times[m][1]) for m in modes}
    for m in modes:
        p, d = statistics.median(times[m][0]), statistics.median(times[m][1])
        line = {"bench": "generate", "impl": "torch " + torch.__version__, "threads":
                torch.get_num_threads(), "config": name, "device": args.device,
                "precision": args.precision, "mode": "cache" if m else "recompute",
                "batch": args.batch, "prompt": P, "new": N, "rounds": args.rounds,
                "prefill_tokens_per_s": round(args.batch * P / p, 1),
                "decode_tokens_per_s": round(rate[m], 2),
                "ms_per_token": round(1e3 * d / (N - 1), 3)}
        if m and False in modes:
            line["decode_speedup"] = round(rate[True] / rate[False], 2)
        print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="cpu-small,shakespeare-char,gpt2-124m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--modes", default="cache,recompute")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    for name in args.configs.split(","):
        run_config(args, name)


if __name__ == "__main__":
    main()
