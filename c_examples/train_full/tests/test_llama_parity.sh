#!/usr/bin/env bash
# train_full --arch llama against Hugging Face transformers, without torch:
# tests/data/llama/ holds a tiny LlamaForCausalLM that transformers wrote
# (save_pretrained: model.safetensors, config.json) and what torch computed
# with it (scripts/llama_fixtures.py), its binary files in text form: the
# folder is rebuilt here, byte for byte (scripts/fixture_text.py). train_full
# --init-from reads the folder as transformers wrote it (config.json sets
# the model's sizes) and --score prints
# the same figures, which must agree within:
#   logits     5e-5 absolute of torch's float64: they reach 6.3 (rms 1.6),
#              where one float32 rounding is ~4e-7, and 2 blocks of float32
#              sums compound it: torch's own float32 run is 1.1e-5 off its
#              float64 one, train_full 7.8e-6; 5e-5 leaves room for another
#              BLAS or thread count, while a wrong RoPE pairing, norm or
#              head grouping moves logits by 0.1 or more
#   loss       1e-6 relative, grad_norm 2e-6, sgd_loss 3e-6: ten times or
#              more the larger of torch float32's and train_full's distance
#              to float64 (loss 4e-8, grad_norm 1.6e-7, sgd_loss 2.4e-7)
# and the config.json checks refuse flags that disagree with the file.
# Usage: test_llama_parity.sh BINARY FIXTURE_DIR
set -euo pipefail
bin=${1:?binary}
src=${2:?fixture folder}
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fx=$tmp/fixture
python3 "$here/scripts/fixture_text.py" folder "$src" "$fx"

rc=0
"$bin" --arch llama --init-from "$fx" --data "$fx/text.dat" --score --lr 0.1 \
    >"$tmp/ours" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "FAIL: train_full --score exited $rc"; cat "$tmp/err"; exit 1
fi
# One line per figure: name, ours, float64's, float32's, and the verdict.
awk -v tol_logit=5e-5 -v tol_loss=1e-6 -v tol_grad=2e-6 -v tol_sgd=3e-6 '
    function abs(x) { return x < 0 ? -x : x }
    FNR == NR { if ($1 == "logits") for (i = 3; i <= NF; i++) ours[$2, i] = $i;
                else ours[$1] = $2; next }
    $1 == "logits64" || $1 == "logits32" {
        for (i = 3; i <= NF; i++) {
            if (!(($2, i) in ours)) { missing++; continue }
            d = abs(ours[$2, i] - $i)
            if ($1 == "logits64" && d > max64) max64 = d
            if ($1 == "logits32" && d > max32) max32 = d
            n[$1]++
        }
        next
    }
    { ref[$1] = $2 }
    END {
        bad = missing > 0 || n["logits64"] != 32 * 256
        printf "logits: %d compared; max |ours - torch float64| %.3g, |ours - torch float32| %.3g (tolerance %g vs float64)\n", n["logits64"], max64, max32, tol_logit
        if (max64 > tol_logit) bad = 1
        split("loss grad_norm sgd_loss", names, " ")
        for (k = 1; k <= 3; k++) {
            name = names[k]; tol = name == "loss" ? tol_loss : name == "grad_norm" ? tol_grad : tol_sgd
            r64 = ref[name "64"]; rel = abs(ours[name] - r64) / abs(r64)
            printf "%s: ours %s, torch float64 %.9g (rel. diff %.3g), float32 %s (tolerance %g)\n", name, ours[name], r64, rel, ref[name "32"], tol
            if (!(name in ours) || rel > tol) bad = 1
        }
        exit bad
    }' "$tmp/ours" "$fx/reference.txt" >"$tmp/verdict" || rc=$?
sed 's/^/    /' "$tmp/verdict"
if [ "$rc" -ne 0 ]; then
    echo "FAIL: train_full --score differs from transformers' figures"; fails=$((fails + 1))
else
    echo "ok: train_full --init-from (transformers' save_pretrained folder) --score matches torch"
fi

# --export of --arch llama reads back with --init-from DIR and no model
# flags: config.json carries every size, theta and epsilon.
mkdir -p "$tmp/ex"
rc=0
"$bin" --arch llama --preset tiny --heads 4 --kv-heads 2 --rope-theta 500000 --norm-eps 1e-6 \
    --context 16 --tie-embeddings --iters 5 --sample-chars 0 --data "$fx/text.dat" \
    --export "$tmp/ex/model.safetensors" >"$tmp/ex.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] && "$bin" --arch llama --init-from "$tmp/ex" --data "$fx/text.dat" --score \
    >"$tmp/ex_score" 2>"$tmp/ex_score.err" || rc=$?
want='"architectures": ["LlamaForCausalLM"]|"model_type": "llama"|"vocab_size": 256|"hidden_size": 32|"intermediate_size": 96|"num_hidden_layers": 1|"num_attention_heads": 4|"num_key_value_heads": 2|"max_position_embeddings": 16|"rms_norm_eps": 1e-06|"rope_theta": 500000|"tie_word_embeddings": true|"hidden_act": "silu"|"torch_dtype": "float32"'
missing=$(IFS='|'; for w in $want; do grep -qF -- "$w" "$tmp/ex/config.json" || echo "$w"; done)
if [ "$rc" -ne 0 ] || [ -n "$missing" ] || ! grep -q "^logits 15 " "$tmp/ex_score"; then
    echo "FAIL: llama --export then --init-from DIR --score (exit $rc; config.json lacks: $missing)"
    cat "$tmp/ex.out" "$tmp/ex_score.err" "$tmp/ex/config.json" 2>/dev/null; fails=$((fails + 1))
else
    echo "ok: --arch llama --export's config.json has LlamaConfig's members; --init-from DIR reads it back"
fi

# expect_fail "MESSAGE PART" ARGS...: exit status 2 and the message on stderr.
expect_fail() {
    local want=$1
    shift
    local rc=0
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        echo "FAIL: $* exited $rc, want 2"; cat "$tmp/err"; fails=$((fails + 1))
    elif ! grep -qF -- "$want" "$tmp/err"; then
        echo "FAIL: $*: stderr lacks '$want':"; cat "$tmp/err"; fails=$((fails + 1))
    else
        echo "ok: $(head -n1 "$tmp/err")"
    fi
}
score=(--init-from "$fx" --data "$fx/text.dat" --score)
expect_fail "describes a llama model: pass --arch llama" "${score[@]}"
expect_fail "num_attention_heads is 4, but --heads 8 was given" --arch llama --heads 8 "${score[@]}"
expect_fail "num_key_value_heads is 2, but --kv-heads 1 was given" --arch llama --kv-heads 1 "${score[@]}"
expect_fail "rope_theta is 10000, but --rope-theta 500000 was given" \
    --arch llama --rope-theta 500000 "${score[@]}"
expect_fail "max_position_embeddings is 32, but --context 64 was given" \
    --arch llama --context 64 "${score[@]}"
expect_fail "tie_word_embeddings is false, but --tie-embeddings was given" \
    --arch llama --tie-embeddings "${score[@]}"
head -c 200 "$fx/text.dat" >"$tmp/short.dat" # bytes 0..255 not all there: V < 256
expect_fail "config.json has vocab_size 256, but" --arch llama --context 16 --init-from "$fx" --score \
    --data "$tmp/short.dat"
expect_fail "--score needs --init-from" --arch llama --data "$fx/text.dat" --score
# A config.json train_full cannot compute: each refused by name.
mkdir -p "$tmp/bad"
ln -s "$(cd "$fx" && pwd)/model.safetensors" "$tmp/bad/model.safetensors"
for edit in 's/"silu"/"gelu"/' 's/"mlp_bias": false/"mlp_bias": true/' \
            's/"rope_type": "default"/"rope_type": "llama3"/' 's/"head_dim": 16/"head_dim": 32/' \
            's/"hidden_size": 64,/"hidden_size": 64/'; do
    sed "$edit" "$fx/config.json" >"$tmp/bad/config.json"
    case $edit in
    *silu*) want='hidden_act "gelu"' ;;
    *mlp_bias*) want="mlp_bias is true" ;;
    *rope_type*) want='rope_type "llama3"' ;;
    *head_dim*) want="head_dim 32 is not hidden_size 64 / num_attention_heads 4" ;;
    *) want="not a JSON object train_full can read" ;;
    esac
    expect_fail "$want" --arch llama --init-from "$tmp/bad" --data "$fx/text.dat" --score
done
if [ "$fails" -eq 0 ]; then
    echo "test_llama_parity: all passed"
else
    echo "test_llama_parity: $fails failed"
fi
exit "$fails"
