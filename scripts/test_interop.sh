#!/usr/bin/env bash
# `make test-interop`: train_full's --export folder loads in Hugging Face
# transformers as it is and predicts the same text.
#
# Makes a venv in target/interop (once) with torch and transformers from
# PyPI: about 3.0 GB downloaded (PyPI's Linux torch wheel, 539 MB, needs its
# CUDA libraries to import, even on a CPU) and 5.6 GB installed. Then trains
# train_full's tiny preset for 500 steps, exports it into a folder, loads the
# folder with GPT2LMHeadModel.from_pretrained and compares 200 greedy
# characters (--top-k 1) after each of three prompts with train_full's own,
# byte for byte.
# Not part of `make test`: it needs the network the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/interop/venv
data=../shared/data/shakespeare_tiny.txt
[ -f "$data" ] || data=data/shakespeare.txt
[ -f "$data" ] || make data
[ -x build/train_full ] || make --no-print-directory build/train_full
if ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
    echo "interop: installing torch and transformers into $venv (about 3.0 GB, once)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch transformers
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/test_interop.XXXXXX")
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$work"; fi' EXIT
mkdir -p "$work/hf"
build/train_full --preset tiny --iters 500 --lr 1e-2 --eval-every 500 --sample-chars 0 --data "$data" \
    --export "$work/hf/model.safetensors" >"$work/train.out"
# --top-k 1 keeps only the most likely byte: greedy. A small model's greedy
# text soon repeats itself, so three prompts give three different starts.
fail=0
for prompt in "ROMEO:" $'\nKING HENRY.\n' "What say you, my lord"; do
    build/train_full --preset tiny --sample-only --init-from "$work/hf/model.safetensors" \
        --data "$data" --prompt "$prompt" --top-k 1 --sample-chars 200 >"$work/out.txt" 2>/dev/null
    head -c -1 "$work/out.txt" >"$work/ours.txt" # the newline train_full ends its output with
    n=$(( $(wc -c <"$work/ours.txt") - ${#prompt} ))
    "$venv/bin/python" scripts/interop_gpt2.py "$work/hf" "$prompt" "$n" >"$work/theirs.txt" 2>"$work/py.err" ||
        { cat "$work/py.err" >&2; exit 1; }
    if cmp -s "$work/ours.txt" "$work/theirs.txt"; then
        echo "PASS interop: transformers' GPT2LMHeadModel.from_pretrained(folder) gives" \
             "train_full's 200 greedy characters byte for byte:"
        { fold -w 72 "$work/ours.txt"; echo; } | head -n 3 | sed "s/^/    | /"
    else
        echo "FAIL interop: the greedy samples differ"
        echo "  train_full:";   sed 's/^/    | /' "$work/ours.txt"
        echo "  transformers:"; sed 's/^/    | /' "$work/theirs.txt"
        fail=1
    fi
done
exit "$fail"
