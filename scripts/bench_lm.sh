#!/usr/bin/env bash
# The GPT-2-shaped step of build/train_full (--preset gpt2: 12 layers, 12
# heads, 768 wide, GPT-2's vocabulary of 50257, tied output) at T = 256,
# B = 4, and a Llama of the same width and depth (RMSNorm, RoPE, SwiGLU of
# 2048, grouped-query attention with 4 key/value heads, untied output),
# against PyTorch's best on the same model (scripts/bench_lm_torch.py:
# transformers, eager or sdpa attention, foreach or fused AdamW).
#
# Per model: PAIRS alternated runs (ours, then PyTorch's), the median of
# each side's per-run figures, ratio = ours / PyTorch (below 1 is faster).
# A run's figure is the median of STEPS timed steps: train_full's summary
# median skips its first min(STEPS, 10) steps (it runs STEPS + that many),
# PyTorch's run skips 2 warm-up steps. The first pair times every PyTorch
# configuration and keeps the fastest; the later pairs run that one.
# Both sides get the same threads (AG_NUM_THREADS, torch.set_num_threads)
# and, with --taskset, the same CPUs. The data: a shard of random tokens in
# llm.c's format, written here with Python's standard library, so the
# script needs neither cargo nor the network (prebuilt binaries do).
# Prints per model:
#   bench lm model=gpt2 ours_ms=... torch_ms=... ratio=... config=...
#       params=OURS/PYTORCH torch_config=... (then each run's figures)
# Usage: scripts/bench_lm.sh [--threads N] [--taskset CPUS] [--steps S]
#   [--pairs P] [--train PATH] [--python PY] [--models "gpt2 llama"]
#   [--layers L] [--quick]
# --quick (make bench --quick) skips it: a 124M-parameter step takes seconds.
# --layers overrides the depth of both models (a short check of the script).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 cpus= steps=5 pairs=3 train=build/train_full py= models="gpt2 llama" layers=12
while [ $# -gt 0 ]; do
    case $1 in
    --threads | --taskset | --steps | --pairs | --train | --python | --models | --layers)
        [ $# -ge 2 ] || { echo "bench_lm.sh: $1: missing value" >&2; exit 2; } ;;&
    --threads) threads=$2; shift ;;
    --taskset) cpus=$2; shift ;;
    --steps) steps=$2; shift ;;
    --pairs) pairs=$2; shift ;;
    --train) train=$2; shift ;;
    --python) py=$2; shift ;;
    --models) models=$2; shift ;;
    --layers) layers=$2; shift ;;
    --quick)
        echo "bench lm: skipped in the quick form (a GPT-2-sized step takes seconds; run scripts/bench_lm.sh)"
        exit 0
        ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_lm.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for n in "$threads" "$steps" "$pairs" "$layers"; do
    case $n in '' | *[!0-9]* | 0*) echo "bench_lm.sh: '$n' is not a positive count" >&2; exit 2 ;; esac
done
if [ ! -x "$train" ]; then
    echo "bench_lm.sh: no $train (make build/train_full, or --train PATH)" >&2
    exit 2
fi
if [ -z "$py" ]; then
    for cand in "${BENCH_PYTHON:-}" target/bench-venv/bin/python target/interop/venv/bin/python python3; do
        if [ -n "$cand" ] && "$cand" -c 'import torch, transformers' 2>/dev/null; then
            py=$cand
            break
        fi
    done
fi
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Random GPT-2 token ids: 256 int32 of header (magic 20240520, version 1, the
# count), then the tokens as uint16.
"${py:-python3}" - "$tmp" <<'EOF'
import array, random, struct, sys
rng = random.Random(1337)
for name, count in (("lm_train_000000.bin", 1 << 18), ("lm_val_000000.bin", 1 << 13)):
    header = struct.pack("<256i", 20240520, 1, count, *([0] * 253))
    tokens = array.array("H", (rng.randrange(50257) for _ in range(count)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(header + tokens.tobytes())
EOF

B=4 T=256
warm=$((steps < 10 ? steps : 10)) # the steps train_full's summary median leaves out
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours() {
    local out
    out=$(AG_NUM_THREADS=$threads "${pin[@]}" "$train" --preset gpt2 --context "$T" --batch "$B" \
        --layers "$layers" "$@" --data "$tmp/lm_train_*.bin" --val "$tmp/lm_val_*.bin" \
        --iters $((steps + warm)) --eval-every 1000000 --eval-iters 1 --log-every 1000000 \
        --sample-chars 0 2>&1) || { echo "bench_lm.sh: train_full failed: $(tail -n 3 <<<"$out")" >&2; return 1; }
    tail -n 1 <<<"$out" | tr ' ' '\n' | tee "$tmp/ours.summary" | sed -n 's/^ms_per_step=//p'
}
theirs() {
    OMP_NUM_THREADS=$threads "${pin[@]}" "$py" scripts/bench_lm_torch.py --threads "$threads" \
        --steps "$steps" --batch "$B" --context "$T" --layers "$layers" "$@" >"$tmp/torch.out"
    sed 's/^/  /' "$tmp/torch.out" | grep -v -e '^  torch-' -e '^  $' >&2 || true
    sed -n 's/^torch-params //p' "$tmp/torch.out" >"$tmp/torch.params"
    sed -n 's/^torch-best //p' "$tmp/torch.out"
}
for model in $models; do
    case $model in
    gpt2) flags=() config="B$B,T$T,L$layers,NH12,C768,V50257,tied" ;;
    llama)
        flags=(--arch llama --kv-heads 4 --ffn-hidden 2048)
        config="B$B,T$T,L$layers,NH12,KV4,C768,F2048,V50257,untied"
        ;;
    *) echo "bench_lm.sh: unknown model '$model' (gpt2 or llama)" >&2; exit 2 ;;
    esac
    tflags=(--model "$model")
    [ "$model" = llama ] && tflags+=(--kv-heads 4 --ffn-hidden 2048)
    ours_all=() torch_all=() torch_config=
    for _ in $(seq "$pairs"); do
        ours_all+=("$(ours "${flags[@]}")")
        [ -n "$py" ] || continue
        pick=()
        [ -n "$torch_config" ] && pick=(--config "$torch_config")
        if ! read -r _ ms name < <(theirs "${tflags[@]}" "${pick[@]}"); then
            echo "bench_lm.sh: $py scripts/bench_lm_torch.py gave no figure" >&2
            exit 1
        fi
        torch_all+=("$ms")
        torch_config=$name
    done
    o=$(printf '%s\n' "${ours_all[@]}" | median)
    # Both sides' parameter counts, so a line shows the models are the same size.
    params=$(sed -n 's/^params=//p' "$tmp/ours.summary")
    runs="threads=$threads${cpus:+ taskset=$cpus} steps=$steps pairs=$pairs ours_all=$(IFS=,; echo "${ours_all[*]}")"
    if [ -z "$py" ]; then
        echo "bench lm model=$model ours_ms=$o torch_ms=none ratio=none config=$config params=$params $runs" \
            "(no Python with torch and transformers: --python PY or BENCH_PYTHON)"
        continue
    fi
    t=$(printf '%s\n' "${torch_all[@]}" | median)
    echo "bench lm model=$model ours_ms=$o torch_ms=$t" \
        "ratio=$(awk -v a="$o" -v b="$t" 'BEGIN { printf "%.3f", a / b }') config=$config" \
        "params=$params/$(cat "$tmp/torch.params") torch_config=$torch_config $runs torch_all=$(IFS=,; echo "${torch_all[*]}")"
done
