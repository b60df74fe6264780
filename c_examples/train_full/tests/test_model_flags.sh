#!/usr/bin/env bash
# train_full's model flags: each bad value or combination exits 2 with a
# message naming the flags; flags repeating a preset's values build the very
# same model (checkpoint bytes equal); overrides train; llama blocks train
# and resume.
# Usage: test_model_flags.sh BINARY CORPUS
set -euo pipefail
bin=${1:?binary}
corpus=${2:?corpus}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect_fail "MESSAGE PART" ARGS...: exit status 2 and the message on stderr.
expect_fail() {
    local want=$1
    shift
    local rc=0
    "$bin" "$@" --iters 1 --sample-chars 0 --data "$corpus" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        echo "FAIL: $* exited $rc, want 2"; cat "$tmp/err"; fails=$((fails + 1))
    elif ! grep -qF -- "$want" "$tmp/err"; then
        echo "FAIL: $*: stderr lacks '$want':"; cat "$tmp/err"; fails=$((fails + 1))
    else
        echo "ok: $* -> $(head -n1 "$tmp/err")"
    fi
}

expect_fail "--embd 100 is not divisible by --heads 3" --embd 100 --heads 3
expect_fail "--embd 32 is not divisible by --heads 5" --preset tiny --heads 5
expect_fail "--kv-heads 3 does not divide --heads 4" --arch llama --preset small --kv-heads 3
expect_fail "--layers: '0' must be a positive count" --layers 0
expect_fail "--heads: '-2' must be a positive count" --heads -2
expect_fail "--context: '0' must be a positive count" --context 0
expect_fail "--vocab: '0' must be a positive count" --vocab 0
expect_fail "--ffn-hidden: '-1' must be a positive count" --ffn-hidden=-1
expect_fail "--embd: 'x' is not an integer" --embd x
expect_fail "--layers: '65' is out of range (1 to 64)" --layers 65
expect_fail "--rope-theta: 'nan' must be a finite number" --arch llama --rope-theta nan
expect_fail "--norm-eps: '0' must be a finite number greater than 0" --arch llama --norm-eps 0
expect_fail "--arch: unknown architecture 'gpt3'" --arch gpt3
expect_fail "--preset: unknown preset 'huge' (choose tiny, small, medium or gpt2)" --preset huge
expect_fail "--kv-heads 1: --arch gpt2 has one key/value head per query head" --kv-heads 1
expect_fail "--rope-theta 500000: --arch gpt2 has learned position embeddings" --rope-theta 500000
expect_fail "--norm-eps 1e-06: --arch gpt2's LayerNorm has epsilon 1e-5" --norm-eps 1e-6
expect_fail "--tie-embeddings takes no value" --tie-embeddings=yes
expect_fail "RoPE (--arch llama) needs an even head size" --arch llama --embd 30 --heads 2
expect_fail "past a tensor's 2^31 - 1" --embd 65536 --heads 1 --ffn-hidden 65536
expect_fail "--vocab 100: the vocabulary of character data" --vocab 100

# An arena cap below a step of the model: exit 4 after the measuring step,
# naming the model's sizes and the smallest cap that works.
rc=0
"$bin" --preset small --layers 2 --context 32 --arena-limit-mb 1 --iters 1 --sample-chars 0 \
    --data "$corpus" >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -eq 4 ] &&
    grep -qF -- "--arena-limit-mb 1 is too small for preset small (L=2 C=128 T=32)" "$tmp/err" &&
    grep -q "smallest cap that works is --arena-limit-mb [0-9]" "$tmp/err"; then
    echo "ok: $(head -n1 "$tmp/err")"
else
    echo "FAIL: arena cap: exit $rc (want 4): $(cat "$tmp/err")"; fails=$((fails + 1))
fi

# The preset's own values as flags: the same model, bit for bit.
common=(--iters 4 --eval-every 2 --sample-chars 0 --data "$corpus")
"$bin" --preset tiny "${common[@]}" --save "$tmp/a.bin" >/dev/null
"$bin" --preset tiny --arch gpt2 --layers 1 --heads 2 --kv-heads 2 --embd 32 --ffn-hidden 128 \
    --context 32 --norm-eps 1e-5 --tie-embeddings "${common[@]}" --save "$tmp/b.bin" >/dev/null
if cmp -s "$tmp/a.bin" "$tmp/b.bin"; then
    echo "ok: tiny's values as flags give the same checkpoint"
else
    echo "FAIL: tiny's values as flags give another checkpoint"; fails=$((fails + 1))
fi

# Overrides train: 2 blocks, 3 heads of 16, a feed-forward of 100.
"$bin" --preset tiny --layers 2 --heads 3 --embd 48 --ffn-hidden 100 --context 16 \
    "${common[@]}" >"$tmp/out"
summary=$(tail -n1 "$tmp/out")
# V, then per block 2 LayerNorms, q/k/v/o and the feed-forward.
V=$(grep -o 'V=[0-9]*' "$tmp/out" | head -n1 | cut -d= -f2)
C=48 F=100 T=16
want=$((V * C + T * C + 2 * (4 * C + 3 * C * C + 3 * C + C * C + C + C * F + F + F * C + C) + 2 * C))
if [[ "$summary" == *"params=$want "* && "$summary" == *"status=done"* ]]; then
    echo "ok: overridden model trains ($want parameters)"
else
    echo "FAIL: override run: want params=$want status=done: $summary"; fails=$((fails + 1))
fi

# Llama blocks: the parameter count of LlamaForCausalLM's tensors, a loss
# that falls, and a resumed run that continues bit for bit.
"$bin" --arch llama --preset tiny --heads 4 --kv-heads 2 --iters 60 --lr 3e-3 --log-every 10 \
    --eval-every 60 --sample-chars 20 --data "$corpus" --out "$tmp/llama" >"$tmp/out"
summary=$(tail -n1 "$tmp/out")
V=$(grep -o 'V=[0-9]*' "$tmp/out" | head -n1 | cut -d= -f2)
C=32 F=96 KVD=16 # F: 8C/3 rounded up to 32; KVD: 2 kv heads of 8
want=$((2 * V * C + C * C + 2 * KVD * C + C * C + 3 * F * C + 2 * C + C))
first=$(sed -n 2p "$tmp/llama/log.csv" | cut -d, -f3)
last=$(tail -n1 "$tmp/llama/log.csv" | cut -d, -f3)
if [[ "$summary" == *"params=$want "* && "$summary" == *"status=done"* ]] &&
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then
    echo "ok: llama trains ($want parameters, loss $first -> $last)"
else
    echo "FAIL: llama: want params=$want and a falling loss ($first -> $last): $summary"
    fails=$((fails + 1))
fi
grep -q "^arch: llama KV=2 F=96 rope_theta=10000 norm_eps=1e-05 untied embeddings" "$tmp/out" \
    || { echo "FAIL: llama arch line: $(grep '^arch' "$tmp/out")"; fails=$((fails + 1)); }
llama=(--arch llama --preset tiny --heads 4 --kv-heads 1 --tie-embeddings --rope-theta 500000
    --norm-eps 1e-6 --eval-every 2 --sample-chars 0 --data "$corpus")
"$bin" "${llama[@]}" --iters 6 --save "$tmp/l6.bin" >/dev/null
"$bin" "${llama[@]}" --iters 4 --save "$tmp/l4.bin" >/dev/null
"$bin" "${llama[@]}" --iters 6 --resume "$tmp/l4.bin" >/dev/null
if cmp -s "$tmp/l6.bin" "$tmp/l4.bin"; then
    echo "ok: llama 4 steps + resume to 6 == 6 steps"
else
    echo "FAIL: llama resumed run differs"; fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
    echo "test_model_flags: $fails failed"
    exit 1
fi
echo "test_model_flags: all passed"
