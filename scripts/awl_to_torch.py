#!/usr/bin/env python3
"""Load an awl checkpoint into a nanoGPT-style PyTorch model and print its loss.

    python3 scripts/awl_to_torch.py ckpt.safetensors input.txt
    python3 scripts/awl_to_torch.py ckpt.safetensors input.txt --export model.safetensors

The checkpoint's "config" metadata gives the architecture, its "tokenizer"
metadata the tokenizer (awl's char or byte-level BPE), and its tensors the
weights under nanoGPT's names. The loss is the mean next-token cross-entropy
over the text cut into consecutive windows of the model's block size, in
evaluation mode. --export writes the model's state_dict back as a plain
PyTorch safetensors file (lm_head.weight included, as nanoGPT's state_dict
lists it), which `train_gpt --init-from` reads.

Needs only PyTorch (Debian's python3-torch will do); the safetensors format
is read and written here. Not used by awl's build or tests.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I32": torch.int32}


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[e["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[e["dtype"]])
        tensors[name] = t.reshape(e["shape"])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, offset, blobs = {"__metadata__": meta}, 0, []
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        blob = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Tokenizer:
    """awl's serialised tokenizers: "char:<hex bytes>" or "bpe:<left>.<right>,..."."""

    def __init__(self, text):
        kind, _, body = text.partition(":")
        self.kind = kind
        if kind == "char":
            self.byte_of = [int(body[i:i + 2], 16) for i in range(0, len(body), 2)]
            self.id_of = {b: i for i, b in enumerate(self.byte_of)}
        elif kind == "bpe":
            self.merges = [tuple(int(x, 16) for x in m.split(".")) for m in body.split(",")] if body else []
            self.rank = {pair: r for r, pair in enumerate(self.merges)}
        else:
            raise ValueError(f"unknown tokenizer kind {kind!r}")

    def encode(self, data):
        if self.kind == "char":
            missing = sorted(set(data) - set(self.id_of))
            if missing:
                raise ValueError(f"byte 0x{missing[0]:02x} is not in the character vocabulary")
            return [self.id_of[b] for b in data]
        ids = list(data)
        # the merges in rank order, each everywhere, left to right (as awl encodes)
        while len(ids) > 1:
            ranks = [self.rank.get(p, math.inf) for p in zip(ids, ids[1:])]
            best = min(ranks)
            if best == math.inf:
                break
            pair, new, out, i = self.merges[best], 256 + best, [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(new)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's; PyTorch < 2.1 has no bias=False)."""

    def __init__(self, d, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, bias = cfg["n_embd"], cfg["bias"]
        self.n_head = cfg["n_head"]
        self.ln_1 = LayerNorm(d, bias)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.attn.c_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = LayerNorm(d, bias)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.mlp.c_proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(d, dim=2)
        heads = lambda z: z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.n_head)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = att.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """nanoGPT's architecture and parameter names, the head tied to wte."""

    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(cfg["vocab"], cfg["n_embd"])
        self.transformer.wpe = nn.Embedding(cfg["block"], cfg["n_embd"])
        self.transformer.h = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.transformer.ln_f = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("text")
    ap.add_argument("--batch", type=int, default=16, help="windows per forward pass")
    ap.add_argument("--export", metavar="PATH", help="also write the state_dict as safetensors")
    args = ap.parse_args()

    tensors, meta = read_safetensors(args.checkpoint)
    if "config" not in meta or "tokenizer" not in meta:
        sys.exit(f"{args.checkpoint}: no awl config/tokenizer metadata (not an awl checkpoint)")
    cfg = json.loads(meta["config"])
    cfg.setdefault("bias", True)
    model = GPT(cfg)
    weights = {k: v.float() for k, v in tensors.items() if not k.startswith("optimizer.")}
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    model.load_state_dict(weights, strict=True)
    model.eval()

    with open(args.text, "rb") as f:
        ids = torch.tensor(Tokenizer(meta["tokenizer"]).encode(f.read()), dtype=torch.long)
    block = cfg["block"]
    n = (len(ids) - 1) // block
    if n < 1:
        sys.exit(f"{args.text}: {len(ids)} tokens, fewer than block + 1 = {block + 1}")
    x = ids[:n * block].view(n, block)
    y = ids[1:n * block + 1].view(n, block)
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, args.batch):
            total += model(x[i:i + args.batch], y[i:i + args.batch]).item() * len(x[i:i + args.batch])
    print(f"loss {total / n:.6f} over {n * block} tokens ({n} windows of {block}) in PyTorch {torch.__version__}")

    if args.export:
        write_safetensors(args.export, model.state_dict(), {"format": "pt"})
        print(f"wrote {args.export} (PyTorch state_dict, nanoGPT names)")


if __name__ == "__main__":
    main()
