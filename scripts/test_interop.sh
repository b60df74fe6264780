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
# byte for byte. The same for --arch llama (LlamaForCausalLM.from_pretrained),
# with grouped-query attention and an untied lm_head, and once more tied;
# train_full samples from the folder itself (--init-from DIR: config.json
# sets the model's sizes), so the folder also reads back. Then the other
# way round: transformers re-saves the GPT-2 and the Llama folders in
# bfloat16 (torch_dtype) and shards small enough to make several
# (save_pretrained's max_shard_size), and train_full --init-from each sharded
# folder --score gives transformers' float32 loss on the same weights within
# 1e-6 relative (what test_llama_parity.sh allows a float32 loss; measured
# 4.4e-8 for GPT-2, 1.2e-8 for the Llama).
# Not part of `make test`: it needs the network the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${INTEROP_VENV:-target/interop/venv} # another venv with torch and transformers: INTEROP_VENV=DIR
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
mkdir -p "$work/hf" "$work/llama" "$work/llama_tied"
build/train_full --preset tiny --iters 500 --lr 1e-2 --eval-every 500 --sample-chars 0 --data "$data" \
    --export "$work/hf/model.safetensors" >"$work/train.out"
build/train_full --arch llama --preset tiny --heads 4 --kv-heads 2 --iters 1500 --lr 1e-2 \
    --eval-every 1500 --sample-chars 0 --data "$data" --export "$work/llama/model.safetensors" \
    >"$work/train_llama.out"
build/train_full --arch llama --preset tiny --heads 4 --kv-heads 1 --tie-embeddings --iters 1500 \
    --lr 1e-2 --eval-every 1500 --sample-chars 0 --data "$data" \
    --export "$work/llama_tied/model.safetensors" >"$work/train_llama_tied.out"
fail=0
# compare CLASS SCRIPT FOLDER PROMPT TRAIN_FULL_FLAGS...: 200 greedy
# characters of train_full --init-from FOLDER and of transformers, byte for byte.
compare() {
    local class=$1 script=$2 folder=$3 prompt=$4
    shift 4
    build/train_full "$@" --sample-only --init-from "$folder" --data "$data" --prompt "$prompt" \
        --top-k 1 --sample-chars 200 >"$work/out.txt" 2>"$work/err.txt" ||
        { cat "$work/err.txt" >&2; exit 1; }
    head -c -1 "$work/out.txt" >"$work/ours.txt" # the newline train_full ends its output with
    n=$(( $(wc -c <"$work/ours.txt") - ${#prompt} ))
    "$venv/bin/python" "scripts/$script" "$folder" "$prompt" "$n" >"$work/theirs.txt" \
        2>"$work/py.err" || { cat "$work/py.err" >&2; exit 1; }
    if cmp -s "$work/ours.txt" "$work/theirs.txt"; then
        echo "PASS interop ($(basename "$folder")): transformers' $class.from_pretrained(folder) gives" \
             "train_full's 200 greedy characters byte for byte:"
        # sed, not head: it reads to the end, so fold never meets a closed pipe (SIGPIPE).
        { fold -w 72 "$work/ours.txt"; echo; } | sed -n "1,3s/^/    | /p"
    else
        echo "FAIL interop ($(basename "$folder"), $class): the greedy samples differ"
        echo "  train_full:";   sed 's/^/    | /' "$work/ours.txt"
        echo "  transformers:"; sed 's/^/    | /' "$work/theirs.txt"
        fail=1
    fi
}
# --top-k 1 keeps only the most likely byte: greedy. A small model's greedy
# text soon repeats itself, so three prompts give three different starts.
for prompt in "ROMEO:" $'\nKING HENRY.\n' "What say you, my lord"; do
    compare GPT2LMHeadModel interop_gpt2.py "$work/hf" "$prompt" --preset tiny
done
for prompt in "ROMEO:" $'\nKING HENRY.\n' "What say you, my lord"; do
    compare LlamaForCausalLM interop_llama.py "$work/llama" "$prompt" --arch llama
done
compare LlamaForCausalLM interop_llama.py "$work/llama_tied" "ROMEO:" --arch llama
# sharded SCRIPT FOLDER TRAIN_FULL_FLAGS...: transformers writes FOLDER in
# bfloat16 shards; train_full --score loads them and gives its loss.
sharded() {
    local script=$1 folder=$2 out=$2_bf16
    shift 2
    "$venv/bin/python" "scripts/$script" --bf16-shards "$folder" "$out" "$data" 32 \
        >"$work/theirs.txt" 2>"$work/py.err" || { cat "$work/py.err" >&2; exit 1; }
    build/train_full "$@" --init-from "$out" --data "$data" --score >"$work/ours.txt" \
        2>"$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
    if "$venv/bin/python" - "$work/theirs.txt" "$work/ours.txt" <<'PY'; then
import sys
shards, theirs = (lambda w: (int(w[1]), float(w[3])))(open(sys.argv[1]).read().split())
ours = next(float(l.split()[1]) for l in open(sys.argv[2]) if l.startswith("loss "))
rel = abs(ours - theirs) / abs(theirs)
print(f"  {shards} bfloat16 shards: loss {ours} vs transformers' {theirs}, relative {rel:.1e}")
sys.exit(0 if shards >= 2 and rel <= 1e-6 else 1)
PY
        echo "PASS interop ($(basename "$out")): train_full --init-from transformers' bfloat16 shards"
    else
        echo "FAIL interop ($(basename "$out")): the sharded bfloat16 loss differs"; fail=1
    fi
}
sharded interop_gpt2.py "$work/hf" --preset tiny
sharded interop_llama.py "$work/llama" --arch llama
exit "$fail"
