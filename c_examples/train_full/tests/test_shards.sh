#!/usr/bin/env bash
# Token shards: build/tokenize writes llm.c shards from text, train_full
# trains on them (--data glob, --val derived from _train_), resumes on them
# bit for bit, samples token ids decoded by the tokenizer (valid UTF-8, a
# prompt echoed), and refuses bad shards with a message naming file and offset.
# Usage: test_shards.sh TRAIN_FULL TOKENIZE CORPUS (from the repository
# root, with data/gpt2 installed by make tokenizer-data)
set -euo pipefail
bin=${1:?train_full}
tokenize=${2:?tokenize}
corpus=${3:?corpus}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Two training shards (90% of a 1 MiB corpus, at most 200000 tokens each) and the
# validation text split into documents at blank lines.
cut=$(($(stat -c %s "$corpus") * 9 / 10))
head -c "$cut" "$corpus" >"$tmp/train.txt"
tail -c +$((cut + 1)) "$corpus" >"$tmp/val.txt"
"$tokenize" --out "$tmp/sh_train" --shard-tokens 200000 "$tmp/train.txt" >"$tmp/tok.out"
"$tokenize" --out "$tmp/sh_val" --split-on $'\n\n' "$tmp/val.txt" >>"$tmp/tok.out"
[ -f "$tmp/sh_train_000001.bin" ] && [ ! -f "$tmp/sh_train_000002.bin" ] \
    || fail "tokenize: want 2 training shards: $(cat "$tmp/tok.out")"
# Header: magic 20240520, version 1, the count; the first token is <|endoftext|>.
read -r magic version count < <(od -A n -t d4 -N 12 "$tmp/sh_train_000000.bin")
first=$(od -A n -t u2 -j 1024 -N 2 "$tmp/sh_train_000000.bin" | tr -d ' ')
size=$(stat -c %s "$tmp/sh_train_000000.bin")
if [ "$magic" = 20240520 ] && [ "$version" = 1 ] && [ "$count" = 200000 ] &&
    [ "$size" = $((1024 + 2 * count)) ] && [ "$first" = 50256 ]; then
    echo "ok: shard header $magic $version $count, first token $first"
else
    fail "shard header: magic=$magic version=$version count=$count size=$size first=$first"
fi
docs=$(grep -o '[0-9]* documents' "$tmp/tok.out" | tail -n1 | cut -d' ' -f1)
[ "${docs:-0}" -gt 1 ] || fail "--split-on made ${docs:-0} documents"

# Training reads every shard, and a resumed run continues bit for bit.
args=(--preset tiny --vocab 50257 --data "$tmp/sh_train_*.bin" --eval-every 2 --eval-iters 2)
"$bin" "${args[@]}" --iters 6 --save "$tmp/full.bin" >"$tmp/full.out"
grep -q "token shards, train $tmp/sh_train_\*.bin (2 files, " "$tmp/full.out" \
    || fail "data line: $(grep '^data' "$tmp/full.out")"
grep -q "val $tmp/sh_val_\*.bin (1 files, " "$tmp/full.out" || fail "val line"
tail -n1 "$tmp/full.out" | grep -q "status=done" || fail "run: $(tail -n1 "$tmp/full.out")"
"$bin" "${args[@]}" --iters 4 --save "$tmp/part.bin" >/dev/null
"$bin" "${args[@]}" --iters 6 --resume "$tmp/part.bin" >/dev/null
if cmp -s "$tmp/full.bin" "$tmp/part.bin"; then
    echo "ok: 4 steps + resume to 6 == 6 steps on shards"
else
    fail "resumed shard run differs from the run in one go"
fi

# A sample of 20 token ids, decoded: valid UTF-8 in sample.txt; --prompt is
# encoded and the output starts with it (a 2-byte character in it too).
"$bin" "${args[@]}" --iters 4 --sample-chars 20 --out "$tmp/run" >"$tmp/run.out" \
    || fail "sampling run exited $?: $(tail -n2 "$tmp/run.out")"
grep -q "^sample (20 tokens, " "$tmp/run.out" || fail "sample line: $(grep '^sample' "$tmp/run.out")"
sample_bytes=$(tr -d '\n' <"$tmp/run/sample.txt" | wc -c)
if [ "$sample_bytes" -gt 0 ] && iconv -f UTF-8 -t UTF-8 "$tmp/run/sample.txt" >/dev/null; then
    echo "ok: 20 sampled tokens decode to $sample_bytes bytes of valid UTF-8"
else
    fail "sample.txt: $sample_bytes bytes, or not UTF-8: $(od -c "$tmp/run/sample.txt" | head -n3)"
fi
prompt=$'ROMEO:\nO caf\u00e9'
prompt_bytes=$(printf %s "$prompt" | wc -c)
"$bin" "${args[@]}" --sample-only --resume "$tmp/run/ckpt.bin" --prompt "$prompt" \
    --sample-chars 20 >"$tmp/prompt.out" 2>"$tmp/prompt.err" || fail "--prompt run exited $?"
if [ "$(head -c "$prompt_bytes" "$tmp/prompt.out")" = "$prompt" ] &&
    [ "$(wc -c <"$tmp/prompt.out")" -gt $((prompt_bytes + 1)) ] &&
    iconv -f UTF-8 -t UTF-8 "$tmp/prompt.out" >/dev/null; then
    echo "ok: --prompt output starts with the prompt and goes on in valid UTF-8"
else
    fail "--prompt output: $(od -c "$tmp/prompt.out" | head -n3) $(cat "$tmp/prompt.err")"
fi
# Training alone needs no tokenizer: from a folder without data/gpt2 the run
# notes that it writes no sample and succeeds.
abs_bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
(cd "$tmp" && "$abs_bin" "${args[@]}" --iters 1 >"$tmp/notok.out") \
    && grep -q "^note: no sample: token shards decode with --tokenizer DIR" "$tmp/notok.out" \
    && ! grep -q "^sample (" "$tmp/notok.out" && echo "ok: shards train without a tokenizer" \
    || fail "training without a tokenizer: $(tail -n2 "$tmp/notok.out")"

# uint32 shards (magic 20240801, version 7), as llm.c writes for vocabularies
# past 65536: ids up to 69999 under --vocab 70000.
python3 - "$tmp" <<'PY'
import struct, sys
for name, n in (("w_train_000000.bin", 5000), ("w_val_000000.bin", 800)):
    ids = [(i * 7919) % 70000 for i in range(n)]
    header = struct.pack("<3i", 20240801, 7, n) + bytes(4 * 253)
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(header + struct.pack(f"<{n}I", *ids))
PY
"$bin" --preset tiny --vocab 70000 --data "$tmp/w_train_*.bin" --iters 2 >"$tmp/w.out" \
    && tail -n1 "$tmp/w.out" | grep -q "status=done" && echo "ok: uint32 shards train" \
    || fail "uint32 shards: $(tail -n2 "$tmp/w.out")"

# expect_fail "MESSAGE PART" ARGS...: exit status 2 and the message.
expect_fail() {
    local want=$1
    shift
    local rc=0
    "$bin" --preset tiny --iters 1 "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -qF -- "$want" "$tmp/err"; then
        fail "$* exited $rc, want 2 and '$want': $(cat "$tmp/err")"
    else
        echo "ok: $(head -n1 "$tmp/err")"
    fi
}
mkdir -p "$tmp/bad"
good="$tmp/sh_val_000000.bin"
cp "$good" "$tmp/bad/magic_val_0.bin"
printf '\x01\x02\x03\x04' | dd of="$tmp/bad/magic_val_0.bin" conv=notrunc status=none
cp "$good" "$tmp/bad/version_val_0.bin"
printf '\x02' | dd of="$tmp/bad/version_val_0.bin" bs=1 seek=4 conv=notrunc status=none
head -c $(($(stat -c %s "$good") - 7)) "$good" >"$tmp/bad/short_val_0.bin"
head -c 1000 "$good" >"$tmp/bad/header_val_0.bin"
V="--vocab 50257"
expect_fail "magic_val_0.bin: offset 0: magic 67305985 is not a token shard's" \
    $V --data "$tmp/sh_train_*.bin" --val "$tmp/bad/magic_val_0.bin"
expect_fail "version_val_0.bin: offset 4: version 2, but magic 20240520 goes with version 1" \
    $V --data "$tmp/sh_train_*.bin" --val "$tmp/bad/version_val_0.bin"
expect_fail "short_val_0.bin: offset 8: the header counts" \
    $V --data "$tmp/sh_train_*.bin" --val "$tmp/bad/short_val_0.bin"
expect_fail "(truncated?)" $V --data "$tmp/sh_train_*.bin" --val "$tmp/bad/short_val_0.bin"
expect_fail "header_val_0.bin: truncated header: the file has 1000 bytes" \
    $V --data "$tmp/sh_train_*.bin" --val "$tmp/bad/header_val_0.bin"
expect_fail "sh_train_000000.bin: offset 1024 (token 0): id 50256 is not below the vocabulary size 1000" \
    --vocab 1000 --data "$tmp/sh_train_*.bin"
expect_fail "--data: no file matches '$tmp/none_train_*.bin'" $V --data "$tmp/none_train_*.bin"
expect_fail "token shards need --vocab V" --data "$tmp/sh_train_*.bin"
expect_fail "no _train_ in the pattern" $V --data "$tmp/sh_val_*.bin"
expect_fail "--val x.bin: validation shards go with training shards" --val x.bin
expect_fail "--tokenizer $tmp/none: sampling from token shards needs GPT-2's tokenizer" \
    $V --data "$tmp/sh_train_*.bin" --tokenizer "$tmp/none" --prompt hi
expect_fail "--tokenizer x: the tokenizer goes with token shards" --tokenizer x

if [ "$fails" -ne 0 ]; then
    echo "test_shards: $fails failed"
    exit 1
fi
echo "test_shards: all passed"
