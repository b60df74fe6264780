#!/usr/bin/env python3
"""Parity fixtures for train_full --arch llama, written by Hugging Face
transformers (c_examples/train_full/tests/test_llama_parity.sh reads them
without torch).

usage: llama_fixtures.py DIR

Builds a tiny LlamaForCausalLM from a fixed seed (2 layers, hidden 64, 4
heads, 2 key/value heads, intermediate 160, a byte vocabulary of 256,
context 32, rope_theta 10000, eps 1e-5, untied lm_head) and writes into DIR:

  model.safetensors, config.json   save_pretrained (safetensors, float32)
  text.dat    the bytes train_full reads as --data: the 33 scored bytes,
              then every byte 0..255 twice, so that the data's sorted byte
              vocabulary is id i = byte i, as the model's
  reference.txt  what torch computes for the first 33 bytes (ids = the
              first 32, targets = the next 32), in float64 and float32:
                loss64 L        mean cross-entropy
                loss32 L
                grad_norm64 G   the global L2 norm of every gradient
                grad_norm32 G
                sgd_loss64 L    the loss after one plain SGD step, lr 0.1
                sgd_loss32 L
                logits64 t v0 v1 ... v255   (one line per position t)
                logits32 t v0 ...
              Float64 means float64 throughout, RoPE's angles too (which
              transformers computes in float32 in any model: see rope_in).

then stores model.safetensors and text.dat as text (model.safetensors.txt,
text.dat.hex: scripts/fixture_text.py textify, which checks that they
rebuild byte for byte); the tests rebuild the folder in a temporary one.

The initial weights are wider than transformers' default (std 0.2, not
0.02) and the norms' weights are not all one, so that attention is far from
uniform and every weight moves the logits. Needs torch and transformers
(make test-interop's venv); the committed files were made with torch 2.15
and transformers 5.24.
"""

import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import fixture_text

TEXT = b"ROMEO: But soft! what light thro"
SGD_LR = 0.1


def rope_in(dtype, theta, dim):
    """A LlamaRotaryEmbedding.forward whose angles, cos and sin are computed
    in `dtype`: transformers computes them in float32 even in a float64
    model, which would leave float32 rounding in the float64 reference."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=dtype) / dim))

    def forward(x, position_ids):
        freqs = position_ids[..., None].to(dtype) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    return forward


def scored(model, ids, dtype):
    m = model.to(dtype)
    cfg = m.config
    dim = cfg.hidden_size // cfg.num_attention_heads
    rope = m.model.rotary_emb
    if dtype == torch.float64:
        rope.forward = rope_in(dtype, cfg.rope_parameters["rope_theta"], dim)
    elif "forward" in vars(rope):
        del rope.forward  # transformers' own, as it runs in float32
    inp = torch.tensor([ids[:-1]])
    tgt = torch.tensor(ids[1:])
    logits = m(inp).logits[0]
    loss = torch.nn.functional.cross_entropy(logits, tgt)
    m.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters()))
    saved = {k: v.detach().clone() for k, v in m.state_dict().items()}
    with torch.no_grad():
        for p in m.parameters():
            p -= SGD_LR * p.grad
        after = torch.nn.functional.cross_entropy(m(inp).logits[0], tgt)
    m.load_state_dict(saved)
    return logits.detach().double(), loss.item(), norm.item(), after.item()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.2,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(20261127)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)

    data = TEXT + b"\n" + bytes(range(256)) * 2
    with open(f"{out}/text.dat", "wb") as f:
        f.write(data)
    ids = list(data[: config.max_position_embeddings + 1])

    lines = []
    l64, loss64, norm64, sgd64 = scored(model, ids, torch.float64)
    l32, loss32, norm32, sgd32 = scored(model, ids, torch.float32)
    lines += [f"loss64 {loss64:.17g}", f"loss32 {loss32:.9g}"]
    lines += [f"grad_norm64 {norm64:.17g}", f"grad_norm32 {norm32:.9g}"]
    lines += [f"sgd_loss64 {sgd64:.17g}", f"sgd_loss32 {sgd32:.9g}"]
    for tag, logits, fmt in (("logits64", l64, ".10g"), ("logits32", l32, ".8g")):
        for t, row in enumerate(logits.tolist()):
            lines.append(f"{tag} {t} " + " ".join(format(v, fmt) for v in row))
    with open(f"{out}/reference.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    fixture_text.textify(out)
    print(f"{out}: loss64 {loss64:.9f} loss32 {loss32:.9f} grad_norm64 {norm64:.6f} "
          f"sgd_loss64 {sgd64:.9f}; max |logits32 - logits64| "
          f"{(l32 - l64).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
