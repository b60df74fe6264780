#!/usr/bin/env bash
# Every gradient tensor of train_full --score against torch, for a 2-layer
# Llama with grouped-query attention (tests/data/llama) and a 2-layer GPT-2
# with tied embeddings (tests/data/gpt2), without torch: the folders hold
# the model transformers saved, the float64 gradients (stored as float32,
# each within half a float32 ulp of float64's) and, per tensor, torch
# float32's max error against float64 (scripts/lm_parity_fixtures.py), their
# binary files in text form: rebuilt here, byte for byte, in a temporary
# folder (scripts/fixture_text.py).
# For every tensor, and for the loss:
#   max |ours - f64| <= 2 * max |torch32 - f64| + 4 ulp(max |f64|)
# ulp of float32 at that magnitude. Against the stored (rounded) values the
# check is max |ours - stored| <= 2 * torch32 + 3.5 ulp, which implies it.
# Prints a table (tensor, our error, torch32's error, ratio) per model and
# fails naming each tensor outside.
# Usage: test_lm_parity.sh BINARY [LLAMA_DIR GPT2_DIR]
set -euo pipefail
bin=${1:?binary}
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
llama=$tmp/llama
gpt2=$tmp/gpt2
python3 "$here/scripts/fixture_text.py" folder "${2:-tests/data/llama}" "$llama"
python3 "$here/scripts/fixture_text.py" folder "${3:-tests/data/gpt2}" "$gpt2"

# compare NAME FIXTURE_DIR OURS_STDOUT OURS_GRADS
compare() {
    python3 - "$@" <<'PY'
import json, math, struct, sys

label, fx, ours_out, ours_grads = sys.argv[1:5]

def ulp32(x):
    """The float32 spacing at |x| (at least the smallest normal's)."""
    e = math.frexp(max(abs(x), 2.0 ** -126))[1]
    return 2.0 ** (e - 24)

def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for name, t in json.loads(b[8:8 + n]).items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        fmt = {"F32": "f", "F64": "d"}[t["dtype"]]
        out[name] = struct.unpack(f"<{(hi - lo) // struct.calcsize(fmt)}{fmt}",
                                  b[8 + n + lo:8 + n + hi])
    return out

ref = tensors(f"{fx}/grads64.safetensors")
ours = tensors(ours_grads)
bad = []
rows = []
with open(f"{fx}/grads.txt") as f:
    lines = [l.split() for l in f if l.strip()]
loss64, loss32 = float(lines[0][1]), float(lines[0][2])
our_loss = next(float(l.split()[1]) for l in open(ours_out) if l.startswith("loss "))
err, t32 = abs(our_loss - loss64), abs(loss32 - loss64)
tol = 2 * t32 + 4 * ulp32(loss64)
rows.append(("loss", err, t32, tol))
if err > tol:
    bad.append("loss")
for name, t32, max64 in ((l[0], float(l[1]), float(l[2])) for l in lines[1:]):
    if name not in ours or len(ours[name]) != len(ref[name]):
        bad.append(f"{name} (missing or wrong size in ours)")
        continue
    err = max(abs(a - b) for a, b in zip(ours[name], ref[name]))
    tol = 2 * t32 + 3.5 * ulp32(max64)
    rows.append((name, err, t32, tol))
    if err > tol:
        bad.append(name)
extra = sorted(set(ours) - {l[0] for l in lines[1:]})
bad += [f"{n} (not in the fixture)" for n in extra]
w = max(len(r[0]) for r in rows)
print(f"    {label}: {'tensor':<{w}}  {'ours':>9}  {'torch32':>9}  {'ratio':>6}  {'tolerance':>9}")
for name, err, t32, tol in rows:
    ratio = err / t32 if t32 > 0 else float("inf")
    mark = "" if err <= tol else "  <- outside"
    print(f"    {label}: {name:<{w}}  {err:9.3g}  {t32:9.3g}  {ratio:6.2f}  {tol:9.3g}{mark}")
if bad:
    print(f"    {label}: outside 2x torch float32's error: " + ", ".join(bad))
    sys.exit(1)
PY
}

run() { # LABEL DIR FLAGS...
    local label=$1 dir=$2
    shift 2
    local rc=0
    "$bin" "$@" --init-from "$dir" --data "$dir/text.dat" --score --score-grads "$tmp/$label.st" \
        >"$tmp/$label.out" 2>"$tmp/$label.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL: $label: train_full --score --score-grads exited $rc"; cat "$tmp/$label.err"
        fails=$((fails + 1)); return
    fi
    if compare "$label" "$dir" "$tmp/$label.out" "$tmp/$label.st"; then
        echo "ok: $label: the loss and every gradient tensor within 2x torch float32's error"
    else
        echo "FAIL: $label: gradients differ from torch float64's"; fails=$((fails + 1))
    fi
}
run llama "$llama" --arch llama
run gpt2 "$gpt2" --layers 2 --heads 4 --embd 64 --context 32

# The comparator can fail: one reference value moved by 1e-3 is named.
mkdir -p "$tmp/bad"
cp "$gpt2"/* "$tmp/bad/"
python3 - "$tmp/bad/grads64.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
import json
lo = json.loads(b[8:8 + n])["transformer.h.1.mlp.c_fc.bias"]["data_offsets"][0] + 8 + n
struct.pack_into("<f", b, lo, struct.unpack_from("<f", b, lo)[0] + 1e-3)
open(p, "wb").write(b)
PY
rc=0
"$bin" --layers 2 --heads 4 --embd 64 --context 32 --init-from "$tmp/bad" --data "$tmp/bad/text.dat" \
    --score --score-grads "$tmp/bad.st" >"$tmp/bad.out" 2>/dev/null || rc=$?
if [ "$rc" -eq 0 ] && ! compare bad "$tmp/bad" "$tmp/bad.out" "$tmp/bad.st" >"$tmp/bad.verdict" &&
    grep -q "outside 2x.*transformer.h.1.mlp.c_fc.bias" "$tmp/bad.verdict"; then
    echo "ok: a perturbed reference gradient fails, named"
else
    echo "FAIL: a perturbed reference gradient was not caught"; cat "$tmp/bad.verdict"
    fails=$((fails + 1))
fi
if "$bin" --score-grads x --data "$gpt2/text.dat" >/dev/null 2>"$tmp/err" ||
    ! grep -qF -- "--score-grads needs --score" "$tmp/err"; then
    echo "FAIL: --score-grads without --score was not refused"; fails=$((fails + 1))
else
    echo "ok: $(head -n1 "$tmp/err")"
fi
[ "$fails" -eq 0 ]
