#!/usr/bin/env python3
"""Per-tensor gradient parity fixtures for train_full --score-grads, for a
tiny Llama with grouped-query attention and a tiny GPT-2, written by torch
(c_examples/train_full/tests/test_lm_parity.sh reads them without torch).

usage: lm_parity_fixtures.py LLAMA_DIR GPT2_DIR

LLAMA_DIR holds scripts/llama_fixtures.py's model (read, not rewritten; as
text, rebuilt in a temporary folder by scripts/fixture_text.py).
GPT2_DIR gets a GPT2LMHeadModel from a fixed seed (2 layers, n_embd 64, 4
heads, n_inner 256, n_positions 32, a byte vocabulary of 256, gelu_new,
LayerNorm eps 1e-5, no dropout, lm_head tied to wte, as train_full's GPT-2;
weights std 0.2 and LayerNorm weights and biases not 1 and 0, so that every
weight moves the loss): model.safetensors and config.json
(save_pretrained), and text.dat (as the llama's: the scored bytes, then
every byte twice, so that train_full's id i is byte i).

Into each folder, for the loss of the first 33 bytes (ids the first 32,
targets the next 32):

  grads64.safetensors  every parameter's gradient in float64 arithmetic
              (RoPE's angles too, see llama_fixtures.rope_in), rounded to
              float32 to keep the fixtures small: each stored value is
              within half a float32 ulp of the float64 one
  grads.txt   one line per parameter: NAME TORCH32_ERR MAX_ABS64, where
              TORCH32_ERR is max |torch float32's gradient - float64's| and
              MAX_ABS64 is max |float64's gradient|; first a line
              "loss LOSS64 LOSS32"

The binary files (model.safetensors, grads64.safetensors, text.dat) are
then stored as text (NAME.safetensors.txt, text.dat.hex: fixture_text.py
textify, which checks that they rebuild byte for byte).

The tied GPT-2 weight has one gradient, transformer.wte.weight: the sum of
its uses as the embedding and as lm_head, in torch as in train_full. Needs
torch and transformers (make test-interop's venv); the committed files
were made with torch 2.15 and transformers 5.24.
"""

import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM

import fixture_text

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_fixtures import TEXT, rope_in  # noqa: E402

N_CTX = 32


def gradients(model, ids, dtype, llama):
    m = model.to(dtype)
    if llama:
        cfg = m.config
        rope = m.model.rotary_emb
        dim = cfg.hidden_size // cfg.num_attention_heads
        if dtype == torch.float64:
            rope.forward = rope_in(dtype, cfg.rope_parameters["rope_theta"], dim)
        elif "forward" in vars(rope):
            del rope.forward
    inp = torch.tensor([ids[:-1]])
    tgt = torch.tensor(ids[1:])
    loss = torch.nn.functional.cross_entropy(m(inp).logits[0], tgt)
    m.zero_grad()
    loss.backward()
    # named_parameters lists a tied weight once (GPT-2's wte, not lm_head).
    grads = {n: p.grad.detach().double().clone() for n, p in m.named_parameters()}
    return loss.item(), grads


def write(out, model, llama):
    ids = list(open(f"{out}/text.dat", "rb").read()[: N_CTX + 1])
    loss64, g64 = gradients(model, ids, torch.float64, llama)
    loss32, g32 = gradients(model, ids, torch.float32, llama)
    lines = [f"loss {loss64:.17g} {loss32:.9g}"]
    for name, g in g64.items():
        err = (g32[name] - g).abs().max().item()
        lines.append(f"{name} {err:.9g} {g.abs().max().item():.17g}")
    save_file({n: g.float().contiguous() for n, g in g64.items()},
              f"{out}/grads64.safetensors")
    with open(f"{out}/grads.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{out}: loss64 {loss64:.9f} loss32 {loss32:.9f}, {len(g64)} tensors")


def gpt2_model(out):
    os.makedirs(out, exist_ok=True)
    config = GPT2Config(
        vocab_size=256, n_positions=N_CTX, n_embd=64, n_layer=2, n_head=4, n_inner=256,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(20261128)
    model = GPT2LMHeadModel(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    with open(f"{out}/text.dat", "wb") as f:
        f.write(TEXT + b"\n" + bytes(range(256)) * 2)
    return model


def main():
    llama_dir, gpt2_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        fixture_text.folder(llama_dir, tmp)
        llama = LlamaForCausalLM.from_pretrained(tmp, attn_implementation="eager").eval()
        write(tmp, llama, True)
        fixture_text.textify(tmp)
        for name in ("grads64.safetensors.txt", "grads.txt"):
            shutil.copyfile(f"{tmp}/{name}", f"{llama_dir}/{name}")
    write(gpt2_dir, gpt2_model(gpt2_dir), False)
    fixture_text.textify(gpt2_dir)


if __name__ == "__main__":
    main()
