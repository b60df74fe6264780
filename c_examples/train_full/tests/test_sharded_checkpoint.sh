#!/usr/bin/env bash
# train_full --init-from a sharded Hugging Face checkpoint (the shards a
# model.safetensors.index.json names), without torch:
#   * tests/data/gpt2 split into two float32 shards here (by
#     scripts/safetensors_fixtures.py, standard library only) scores the
#     same loss, gradient norm and SGD loss as the one file, to the bit;
#   * tests/data/gpt2_sharded (the same model, its second shard bfloat16,
#     rounded to nearest even) loads with that shard converted exactly, so
#     its loss differs from the float32 one only by the weights'
#     bfloat16 rounding: within 2^-9 relative (one bfloat16 rounding of the
#     loss itself; measured 2.0e-4) and not equal to it (the bfloat16
#     values were used);
#   * an index that disagrees with its shards is refused (exit 3) with a
#     message naming the file and the tensor.
# Both folders are committed as text and rebuilt here, byte for byte, in a
# temporary folder (scripts/fixture_text.py).
# Usage: test_sharded_checkpoint.sh BINARY [GPT2_DIR SHARDED_DIR]
set -euo pipefail
bin=${1:?binary}
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
gpt2=$tmp/gpt2
sharded=$tmp/gpt2_sharded
python3 "$here/scripts/fixture_text.py" folder "${2:-tests/data/gpt2}" "$gpt2"
python3 "$here/scripts/fixture_text.py" folder "${3:-tests/data/gpt2_sharded}" "$sharded"
gpt2_flags=(--layers 2 --heads 4 --embd 64 --context 32)

score() { # FROM OUT: the loss, grad_norm and sgd_loss lines of --score
    "$bin" "${gpt2_flags[@]}" --init-from "$1" --data "$gpt2/text.dat" --score --lr 0.1 \
        2>"$2.err" | grep -E '^(loss|grad_norm|sgd_loss) ' >"$2"
}

score "$gpt2" "$tmp/one"
mkdir "$tmp/f32"
python3 "$here/scripts/safetensors_fixtures.py" shard "$gpt2" "$tmp/f32" F32
score "$tmp/f32" "$tmp/f32.out"
if cmp -s "$tmp/one" "$tmp/f32.out" && [ "$(wc -l <"$tmp/one")" -eq 3 ]; then
    echo "ok: two float32 shards score what the one file does, to the bit"
else
    echo "FAIL: float32 shards differ from the one file:"; diff "$tmp/one" "$tmp/f32.out" || true
    cat "$tmp/f32.out.err"; fails=$((fails + 1))
fi
if ! grep -q "init: parameters from $tmp/f32/model.safetensors.index.json" "$tmp/f32.out.err"; then
    echo "FAIL: --init-from DIR did not name the index it loaded"; fails=$((fails + 1))
fi

score "$sharded/model.safetensors.index.json" "$tmp/bf16.out"
if python3 - "$tmp/one" "$tmp/bf16.out" <<'PY'; then
import sys
one = float(open(sys.argv[1]).read().split()[1])
bf = float(open(sys.argv[2]).read().split()[1])
rel = abs(bf - one) / abs(one)
print(f"ok: bfloat16 shard: loss {bf} against {one}, relative {rel:.2e} (limit 2^-9)")
sys.exit(0 if 0 < rel <= 2.0 ** -9 else 1)
PY
    :
else
    echo "FAIL: the bfloat16-sharded loss is not within 2^-9 of the float32 one (or equal)"
    cat "$tmp/bf16.out" "$tmp/bf16.out.err"; fails=$((fails + 1))
fi

# refused DIR EXPECTED_TEXT...: exit 3 and each text in the message.
refused() {
    local dir=$1 rc=0
    shift
    "$bin" "${gpt2_flags[@]}" --init-from "$dir" --data "$gpt2/text.dat" --score \
        >/dev/null 2>"$tmp/err" || rc=$?
    local want
    for want in "$@"; do
        if [ "$rc" -ne 3 ] || ! grep -qF -- "$want" "$tmp/err"; then
            echo "FAIL: $dir: exit $rc, message lacks '$want':"; cat "$tmp/err"
            fails=$((fails + 1)); return
        fi
    done
    echo "ok: refused: $1"
}
copy() { rm -rf "$tmp/bad"; cp -r "$sharded" "$tmp/bad"; }
s1=model-00001-of-00002.safetensors
s2=model-00002-of-00002.safetensors
index=$tmp/bad/model.safetensors.index.json

copy; rm "$tmp/bad/$s2"
refused "$tmp/bad" "$s2" "No such file"
copy; sed -i "s/\"transformer.wte.weight\": \"$s2\"/\"transformer.wte.weight\": \"$s1\"/" "$index"
refused "$tmp/bad" "tensor \`transformer.wte.weight\` is in $s2, but the weight_map names $s1"
copy; sed -i "s/\"weight_map\": {/\"weight_map\": {\"transformer.extra\": \"$s1\", /" "$index"
refused "$tmp/bad" "tensor \`transformer.extra\` is in no shard" "$index"
copy; sed -i "/\"transformer.wpe.weight\": \"$s2\",/d" "$index"
refused "$tmp/bad" "tensor \`transformer.wpe.weight\` of $s2 is not in the weight_map"

if [ "$fails" -ne 0 ]; then
    echo "test_sharded_checkpoint: $fails failure(s)"
    exit 1
fi
echo "test_sharded_checkpoint: all passed"
