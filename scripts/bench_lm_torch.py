#!/usr/bin/env python3
"""PyTorch's step on the language models of scripts/bench_lm.sh.

Hugging Face transformers' GPT2LMHeadModel or LlamaForCausalLM, built from
the configuration train_full gets from the same flags (random init, float32,
no dropout), trained with train_full's step: forward, mean cross-entropy
over all B x T next-token targets, backward, clip_grad_norm(1.0), AdamW
(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0), zero_grad.

    bench_lm_torch.py --model gpt2|llama [--threads N] [--steps S]
        [--batch B] [--context T] [--layers L] [--heads NH] [--kv-heads KV]
        [--embd C] [--ffn-hidden F] [--vocab V] [--config NAME]

Each configuration PyTorch offers is timed in turn (attention eager or
sdpa; AdamW foreach or fused) unless --config names one
(`sdpa+fused-adamw`): 2 warm-up steps, then S timed steps on random
tokens, the median of those. Prints one line per configuration and, last:
    torch-params PARAMETERS
    torch-best MODEL MS_PER_STEP CONFIG
Exits 3 when torch or transformers is not installed.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    import transformers
except ImportError as e:
    print(f"bench_lm_torch: {e.name} is not installed", file=sys.stderr)
    sys.exit(3)

WARMUP_STEPS = 2
CONFIGS = [(attn, adamw) for attn in ("eager", "sdpa") for adamw in ("foreach", "fused")]


def build_model(args, attn):
    if args.model == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=args.vocab,
            n_positions=args.context,
            n_embd=args.embd,
            n_layer=args.layers,
            n_head=args.heads,
            n_inner=args.ffn_hidden or 4 * args.embd,
            activation_function="gelu_new",  # tanh GELU, as train_full's
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=True,
        )
        cfg._attn_implementation = attn
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.embd,
        intermediate_size=args.ffn_hidden or (8 * args.embd // 3 + 31) // 32 * 32,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads,
        max_position_embeddings=args.context,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return transformers.LlamaForCausalLM(cfg)


def time_config(args, attn, adamw):
    torch.manual_seed(1)
    model = build_model(args, attn).float().train()
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        fused=adamw == "fused",
        foreach=adamw == "foreach",
    )
    gen = torch.Generator().manual_seed(7)
    shape = (args.batch, args.context)
    times = []
    for i in range(WARMUP_STEPS + args.steps):
        ids = torch.randint(0, args.vocab, shape, generator=gen)
        targets = torch.randint(0, args.vocab, shape, generator=gen)
        t0 = time.perf_counter()
        logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= WARMUP_STEPS:  # warm-up: allocator caches, kernel selection
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), sum(p.numel() for p in model.parameters())


def parse_config(name):
    attn, _, adamw = name.partition("+")
    adamw = adamw.removesuffix("-adamw")
    if (attn, adamw) not in CONFIGS:
        print(f"bench_lm_torch: unknown configuration {name!r} (e.g. sdpa+fused-adamw)", file=sys.stderr)
        sys.exit(2)
    return attn, adamw


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("gpt2", "llama"), required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--ffn-hidden", type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--config", default=None)
    args = p.parse_args()
    if args.steps < 1 or args.threads < 1:
        p.error("--steps and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    configs = [parse_config(args.config)] if args.config else CONFIGS
    best = None
    for attn, adamw in configs:
        name = f"{attn}+{adamw}-adamw"
        try:
            ms, params = time_config(args, attn, adamw)
        except (RuntimeError, TypeError, ValueError) as e:  # a configuration this build lacks
            print(f"  torch {args.model} {name}: unavailable ({e})")
            continue
        print(
            f"  torch {torch.__version__} transformers {transformers.__version__} {args.model}"
            f" {name}: {ms:.1f} ms/step ({params} parameters, {args.threads} threads)",
            flush=True,
        )
        if best is None or ms < best[0]:
            best = (ms, name, params)
    if best is None:
        sys.exit(3)
    print(f"torch-params {best[2]}")
    print(f"torch-best {args.model} {best[0]:.2f} {best[1]}")


if __name__ == "__main__":
    main()
