#!/usr/bin/env bash
# `make install` and `make uninstall`:
#   scripts/install.sh install|uninstall
# Settings (environment, as the Makefile passes them):
#   PREFIX (/usr/local), DESTDIR (empty: staging root prepended to every
#   path), LIBDIR ($PREFIX/lib), INCLUDEDIR ($PREFIX/include),
#   DOCDIR ($PREFIX/share/doc/arenagrad),
#   INSTALL_DEBUG=1 keeps debug info in the installed libraries (stripped
#   by default: the release archive is ~26 MB with it, a few MB without).
#
# Installs:
#   $INCLUDEDIR/arenagrad.h
#   $LIBDIR/libarenagrad.a
#   $LIBDIR/libarenagrad.so.X.Y.Z (SONAME libarenagrad.so.X, set by build.rs)
#   $LIBDIR/libarenagrad.so.X -> libarenagrad.so.X.Y.Z
#   $LIBDIR/libarenagrad.so   -> libarenagrad.so.X
#   $LIBDIR/pkgconfig/arenagrad.pc, arenagrad-static.pc
#   $LIBDIR/cmake/arenagrad/arenagradConfig.cmake, arenagradConfigVersion.cmake
#   $DOCDIR/examples/guide.c, mlp.c, mlp_io.c, sampling.c (the README's example and three more)
# The .pc and .cmake files come from packaging/*.in with the version read
# from Cargo.toml and the static link set from scripts/native_static_libs.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
action=${1:-install}
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
LIBDIR=${LIBDIR:-$PREFIX/lib}
INCLUDEDIR=${INCLUDEDIR:-$PREFIX/include}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/arenagrad}
STRIP=${STRIP:-strip}
case "$PREFIX$LIBDIR$INCLUDEDIR$DOCDIR" in
    *" "*) echo "install: paths with spaces are not supported" >&2; exit 1 ;;
esac
case "$PREFIX" in
    /*) ;;
    *) echo "install: PREFIX must be an absolute path (got '$PREFIX')" >&2; exit 1 ;;
esac

version=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)
IFS=. read -r major minor patch <<<"$version"
if [ -z "$version" ] || [ -z "$patch" ]; then
    echo "install: cannot read the version from Cargo.toml" >&2
    exit 1
fi
so_full=libarenagrad.so.$version
so_major=libarenagrad.so.$major
lib="$DESTDIR$LIBDIR"
inc="$DESTDIR$INCLUDEDIR"
doc="$DESTDIR$DOCDIR"
examples=(guide.c mlp.c mlp_io.c sampling.c)
files=(
    "$inc/arenagrad.h"
    "$lib/libarenagrad.a"
    "$lib/$so_full"
    "$lib/$so_major"
    "$lib/libarenagrad.so"
    "$lib/pkgconfig/arenagrad.pc"
    "$lib/pkgconfig/arenagrad-static.pc"
    "$lib/cmake/arenagrad/arenagradConfig.cmake"
    "$lib/cmake/arenagrad/arenagradConfigVersion.cmake"
)
for e in "${examples[@]}"; do files+=("$doc/examples/$e"); done

if [ "$action" = uninstall ]; then
    for f in "${files[@]}"; do
        if [ -e "$f" ] || [ -L "$f" ]; then
            rm -f "$f"
            echo "removed $f"
        fi
    done
    rmdir "$lib/cmake/arenagrad" "$doc/examples" "$doc" 2>/dev/null || true
    exit 0
fi
[ "$action" = install ] || { echo "usage: $0 install|uninstall" >&2; exit 2; }

a=target/release/libarenagrad.a
so=target/release/libarenagrad.so
for f in "$a" "$so" include/arenagrad.h; do
    [ -f "$f" ] || { echo "install: $f is missing (run cargo build --release)" >&2; exit 1; }
done
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "$so_major" ]; then
    echo "install: $so has SONAME '$soname', expected $so_major (rebuild: cargo build --release)" >&2
    exit 1
fi
# The first install on a toolchain compiles a probe (about 40 s; the
# script says so), later ones read its cached answer.
native_libs=$(bash scripts/native_static_libs.sh)
# rustc lists OpenBLAS itself when openblas-src links the system library;
# add it if a toolchain ever leaves it out.
case " $native_libs " in
    *" -lopenblas "*) ;;
    *) native_libs="-lopenblas $native_libs" ;;
esac
cmake_libs=$(sed 's/^-l//; s/ -l/;/g' <<<"$native_libs")
sizeof_ptr=$(getconf LONG_BIT)
sizeof_ptr=$((sizeof_ptr / 8))
libdir_rel=$(realpath -m --relative-to="$PREFIX" "$LIBDIR")
includedir_rel=$(realpath -m --relative-to="$PREFIX" "$INCLUDEDIR")
cmake_up=$(realpath -m --relative-to="$LIBDIR/cmake/arenagrad" "$PREFIX")
case "$libdir_rel$includedir_rel" in
    ..*|*/..*) echo "install: LIBDIR and INCLUDEDIR must be inside PREFIX" >&2; exit 1 ;;
esac

install -d "$inc" "$lib/pkgconfig" "$lib/cmake/arenagrad"
install -m 644 include/arenagrad.h "$inc/arenagrad.h"
install -d "$doc/examples"
for e in "${examples[@]}"; do install -m 644 "c_examples/$e" "$doc/examples/$e"; done
if [ "${INSTALL_DEBUG:-0}" = 1 ]; then
    install -m 644 "$a" "$lib/libarenagrad.a"
    install -m 755 "$so" "$lib/$so_full"
else
    "$STRIP" --strip-debug -o "$lib/libarenagrad.a.tmp" "$a"
    mv -f "$lib/libarenagrad.a.tmp" "$lib/libarenagrad.a"
    chmod 644 "$lib/libarenagrad.a"
    "$STRIP" --strip-debug -o "$lib/$so_full.tmp" "$so"
    mv -f "$lib/$so_full.tmp" "$lib/$so_full"
    chmod 755 "$lib/$so_full"
fi
ln -sfn "$so_full" "$lib/$so_major"
ln -sfn "$so_major" "$lib/libarenagrad.so"

subst() { # template output
    sed -e "s|@PREFIX@|$PREFIX|g" \
        -e "s|@LIBDIR@|$LIBDIR|g" \
        -e "s|@INCLUDEDIR@|$INCLUDEDIR|g" \
        -e "s|@LIBDIR_REL@|$libdir_rel|g" \
        -e "s|@INCLUDEDIR_REL@|$includedir_rel|g" \
        -e "s|@CMAKE_RELATIVE_PREFIX@|$cmake_up|g" \
        -e "s|@VERSION@|$version|g" \
        -e "s|@VERSION_MAJOR@|$major|g" \
        -e "s|@VERSION_MINOR@|$minor|g" \
        -e "s|@NATIVE_LIBS@|$native_libs|g" \
        -e "s|@CMAKE_NATIVE_LIBS@|$cmake_libs|g" \
        -e "s|@SIZEOF_VOID_P@|$sizeof_ptr|g" \
        "$1" >"$2.tmp"
    if grep -n '@[A-Z_]*@' "$2.tmp" >&2; then
        rm -f "$2.tmp"
        echo "install: unsubstituted placeholder in $1" >&2
        exit 1
    fi
    chmod 644 "$2.tmp"
    mv -f "$2.tmp" "$2"
}
subst packaging/arenagrad.pc.in "$lib/pkgconfig/arenagrad.pc"
subst packaging/arenagrad-static.pc.in "$lib/pkgconfig/arenagrad-static.pc"
subst packaging/arenagradConfig.cmake.in "$lib/cmake/arenagrad/arenagradConfig.cmake"
subst packaging/arenagradConfigVersion.cmake.in "$lib/cmake/arenagrad/arenagradConfigVersion.cmake"
for f in "${files[@]}"; do echo "installed $f"; done
