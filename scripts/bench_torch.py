#!/usr/bin/env python3
"""The PyTorch twin of `make bench`'s GPT step, for ratios measured in one run.

The same model as tests/common/gpt.rs (token + position embeddings, pre-LN
blocks with fused QKV, causal attention, tanh-GELU MLP, final LayerNorm,
lm_head tied to the token embedding, mean cross-entropy) and the same step:
forward, backward, clip_grad_norm(1.0), AdamW, zero_grad. Each configuration
PyTorch offers for this step on a CPU is timed (2 or 1 intra-op threads;
attention written out or scaled_dot_product_attention; for-each or fused
AdamW), and the fastest is reported as PyTorch's best.

    python3 scripts/bench_torch.py PRESET [STEPS [CONFIG]] [--batch B]

prints one line per configuration (only CONFIG's, when given) and, last,
one machine-readable line. CONFIG may name any thread count
(`16-threads+sdpa+fused-adamw`: the scaling table's runs); `--batch B`
overrides the preset's batch:
    torch-best PRESET MS_PER_STEP CONFIG
It exits 3 when torch is not installed, so `make bench` can say so.
"""
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_torch: torch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(3)

PRESETS = {
    # name: (layers, heads, channels, block size, batch)
    "tiny": (1, 2, 32, 32, 8),
    "small": (4, 4, 128, 64, 16),
    "medium": (6, 6, 192, 128, 16),
}
VOCAB = 77  # the Shakespeare corpus' characters, as the Rust bench sees them


class Gpt(torch.nn.Module):
    def __init__(self, n_layer, n_head, c, t, v, sdpa):
        super().__init__()
        self.n_head, self.sdpa = n_head, sdpa
        self.wte = torch.nn.Parameter(torch.randn(v, c) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(t, c) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(n_layer):
            blk = torch.nn.Module()
            blk.ln1 = torch.nn.LayerNorm(c)
            blk.qkv = torch.nn.Linear(c, 3 * c)
            blk.proj = torch.nn.Linear(c, c)
            blk.ln2 = torch.nn.LayerNorm(c)
            blk.fc = torch.nn.Linear(c, 4 * c)
            blk.fc_proj = torch.nn.Linear(4 * c, c)
            self.blocks.append(blk)
        self.ln_f = torch.nn.LayerNorm(c)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        self.register_buffer("mask", mask, persistent=False)

    def attention(self, qkv, b, t, c):
        h = self.n_head
        q, k, v = qkv.view(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
            y = att @ v
        return y.transpose(1, 2).reshape(b, t, c)

    def forward(self, ids, targets):
        b, t = ids.shape
        c = self.wte.shape[1]
        x = self.wte[ids] + self.wpe[:t]
        for blk in self.blocks:
            x = x + blk.proj(self.attention(blk.qkv(blk.ln1(x)), b, t, c))
            x = x + blk.fc_proj(F.gelu(blk.fc(blk.ln2(x)), approximate="tanh"))
        logits = self.ln_f(x) @ self.wte.t()
        return F.cross_entropy(logits.view(b * t, -1), targets.view(-1))


def time_config(preset, steps, sdpa, fused, batch=None):
    n_layer, n_head, c, t, b = PRESETS[preset]
    b = batch or b
    torch.manual_seed(1)
    model = Gpt(n_layer, n_head, c, t, VOCAB, sdpa)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused, foreach=not fused)
    gen = torch.Generator().manual_seed(7)
    times = []
    for i in range(steps + 3):
        ids = torch.randint(0, VOCAB, (b, t), generator=gen)
        tg = torch.randint(0, VOCAB, (b, t), generator=gen)
        t0 = time.perf_counter()
        loss = model(ids, tg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 3:  # warm-up: allocator caches, kernel selection
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def parse_config(name):
    """(threads, sdpa, fused) of a name such as 16-threads+sdpa+fused-adamw."""
    try:
        threads, attn, adamw = name.split("+")
        n = int(threads.removesuffix("-threads"))
        assert n > 0 and attn in ("sdpa", "explicit-attention")
        assert adamw in ("fused-adamw", "foreach-adamw")
    except (ValueError, AssertionError):
        print(f"bench_torch: unknown configuration {name!r}", file=sys.stderr)
        sys.exit(2)
    return n, attn == "sdpa", adamw == "fused-adamw"


def main():
    args = sys.argv[1:]
    batch = None
    if "--batch" in args:
        i = args.index("--batch")
        batch = int(args[i + 1])
        del args[i : i + 2]
    if not args or args[0] not in PRESETS:
        print(f"usage: {sys.argv[0]} {{{'|'.join(PRESETS)}}} [STEPS [CONFIG]] [--batch B]", file=sys.stderr)
        sys.exit(2)
    preset = args[0]
    steps = int(args[1]) if len(args) > 1 else 20
    only = args[2] if len(args) > 2 else None
    best = None
    configs = [(th, sdpa, fused) for th in (2, 1) for sdpa in (False, True) for fused in (False, True)]
    if only is not None:
        configs = [parse_config(only)]
    for threads, sdpa, fused in configs:
        attn = "sdpa" if sdpa else "explicit-attention"
        name = f"{threads}-threads+{attn}+{'fused' if fused else 'foreach'}-adamw"
        torch.set_num_threads(threads)
        try:
            ms = time_config(preset, steps, sdpa, fused, batch)
        except (RuntimeError, TypeError) as e:  # a configuration this torch lacks
            print(f"  torch {preset} {name}: unavailable ({e})")
            continue
        print(f"  torch {torch.__version__} {preset} {name}: {ms:.3f} ms/step")
        if best is None or ms < best[0]:
            best = (ms, name)
    if best is None:
        sys.exit(3)
    print(f"torch-best {preset} {best[0]:.4f} {best[1]}")


if __name__ == "__main__":
    main()
