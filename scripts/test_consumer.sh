#!/usr/bin/env bash
# Installs arenagrad into a temporary prefix and builds tests/consumer/app.c
# outside the repository the three ways a user would, then runs each:
#
#   shared   cc app.c $(pkg-config --cflags --libs arenagrad)
#            -Wl,-rpath,$(pkg-config --variable=libdir arenagrad)
#            runs with LD_LIBRARY_PATH unset; NEEDED libarenagrad.so.<major>
#   static   cc app.c $(pkg-config --static --cflags --libs arenagrad-static)
#            no libarenagrad.so in NEEDED
#   cmake    find_package(arenagrad <major.minor>) + arenagrad::arenagrad,
#            shared and with -DARENAGRAD_USE_STATIC_LIBS=ON; a request for
#            the next major version must be refused
#
# The installed examples (share/doc/arenagrad/examples, where the README
# points) build with the shared link line; guide.c runs, and sampling.c
# samples its own model with NUTS in parallel chains ("sampling ok").
# Also checks the installed files: SONAME, symlinks, no debug info, a
# header without test hooks, and `make uninstall` leaving nothing behind.
# One line per check, then "N passed, N failed"; non-zero exit on failure.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CC=${CC:-cc}
CFLAGS=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
show() { tail -n "${2:-15}" "$1" | sed 's/^/    | /'; }

work=$(mktemp -d "${TMPDIR:-/tmp}/test_consumer.XXXXXX")
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$work"; fi' EXIT
prefix=$work/prefix
version=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}

if ! make --no-print-directory install PREFIX="$prefix" >"$work/install.log" 2>&1; then
    bad "install" "make install PREFIX=$prefix failed"
    show "$work/install.log"
    echo "$pass passed, $fail failed"
    exit 1
fi
ok "install into $prefix"
lib=$prefix/lib

# --- the installed files ---------------------------------------------------
soname=$(readelf -d "$lib/libarenagrad.so.$version" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = "libarenagrad.so.$major" ] &&
    [ "$(readlink "$lib/libarenagrad.so.$major")" = "libarenagrad.so.$version" ] &&
    [ "$(readlink "$lib/libarenagrad.so")" = "libarenagrad.so.$major" ]; then
    ok "shared library: SONAME $soname, symlinks so -> so.$major -> so.$version"
else
    bad "shared library" "SONAME '$soname' or symlinks wrong: $(ls -l "$lib" | tr '\n' ' ')"
fi
if readelf -S "$lib/libarenagrad.so.$version" "$lib/libarenagrad.a" 2>/dev/null | grep -q '\.debug_info'; then
    bad "stripped" "installed libraries carry .debug_info"
else
    ok "stripped (a: $(du -h "$lib/libarenagrad.a" | cut -f1), so: $(du -h "$lib/libarenagrad.so.$version" | cut -f1))"
fi
if grep -q 'ag_test_' "$prefix/include/arenagrad.h"; then
    bad "header" "the installed header declares test hooks (ag_test_*)"
elif ! cmp -s "$prefix/include/arenagrad.h" include/arenagrad.h; then
    bad "header" "the installed header differs from include/arenagrad.h"
else
    ok "header: include/arenagrad.h, no ag_test_ declarations"
fi

# --- pkg-config ------------------------------------------------------------
export PKG_CONFIG_PATH=$lib/pkgconfig
unset PKG_CONFIG_LIBDIR
src=$work/src
mkdir -p "$src"
cp tests/consumer/app.c tests/consumer/CMakeLists.txt "$src/"
cd "$src" || exit 1
run() { # name binary
    if env -u LD_LIBRARY_PATH "./$2" >"$work/$1.out" 2>&1 && grep -q '^consumer ok' "$work/$1.out"; then
        ok "$1 runs: $(head -n 1 "$work/$1.out")"
    else
        bad "$1 run" "exit status or output wrong"
        show "$work/$1.out"
    fi
}
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '; }

pc_version=$(pkg-config --modversion arenagrad 2>&1)
static_private=$(pkg-config --static --libs arenagrad 2>&1)
if [ "$pc_version" = "$version" ] && [[ "$static_private" == *-lopenblas* ]]; then
    ok "pkg-config: version $pc_version; --static --libs: $static_private"
else
    bad "pkg-config" "version '$pc_version', --static --libs '$static_private'"
fi

libdir=$(pkg-config --variable=libdir arenagrad)
# shellcheck disable=SC2046
if "$CC" "${CFLAGS[@]}" app.c -o app_shared $(pkg-config --cflags --libs arenagrad) \
    -Wl,-rpath,"$libdir" >"$work/shared.log" 2>&1; then
    n=$(needed app_shared)
    if [[ " $n " == *" libarenagrad.so.$major "* ]]; then
        ok "shared build (NEEDED: $n)"
        run shared app_shared
    else
        bad "shared build" "NEEDED does not name libarenagrad.so.$major: $n"
    fi
else
    bad "shared build" "compile or link failed"
    show "$work/shared.log"
fi

# shellcheck disable=SC2046
if "$CC" "${CFLAGS[@]}" app.c -o app_static $(pkg-config --static --cflags --libs arenagrad-static) \
    >"$work/static.log" 2>&1; then
    n=$(needed app_static)
    if [[ "$n" == *libarenagrad* ]]; then
        bad "static build" "links the shared library: NEEDED $n"
    else
        ok "static build (NEEDED: $n)"
        run static app_static
    fi
else
    bad "static build" "compile or link failed"
    show "$work/static.log"
fi

# --- the installed examples ------------------------------------------------
exdir=$prefix/share/doc/arenagrad/examples
ex_ok=1
for e in guide mlp mlp_io sampling; do
    # shellcheck disable=SC2046
    if ! "$CC" "${CFLAGS[@]}" "$exdir/$e.c" -o "ex_$e" $(pkg-config --cflags --libs arenagrad) \
        -Wl,-rpath,"$libdir" -lm >"$work/ex_$e.log" 2>&1; then
        bad "examples" "$exdir/$e.c does not build"
        show "$work/ex_$e.log"
        ex_ok=0
    fi
done
if [ "$ex_ok" = 1 ]; then
    if ./ex_guide >"$work/ex_guide.out" 2>&1 && [ "$(tail -n 1 "$work/ex_guide.out")" = ok ]; then
        ok "installed examples build; guide.c runs"
    else
        bad "examples" "the installed guide.c failed"
        show "$work/ex_guide.out"
    fi
    if ./ex_sampling >"$work/ex_sampling.out" 2>&1 && [ "$(tail -n 1 "$work/ex_sampling.out")" = "sampling ok" ]; then
        ok "the installed sampling.c samples its own model (NUTS, parallel chains)"
    else
        bad "examples" "the installed sampling.c failed"
        show "$work/ex_sampling.out"
    fi
fi

# --- CMake -----------------------------------------------------------------
if ! command -v cmake >/dev/null; then
    bad "cmake" "cmake is not installed (make deps installs it)"
else
    cm() { # name extra-args...
        local name=$1
        shift
        cmake -S . -B "build_$name" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$work/$name.log" 2>&1 &&
            cmake --build "build_$name" >>"$work/$name.log" 2>&1
    }
    if cm cmake_shared -DAG_REQUEST_VERSION="$major.$minor"; then
        n=$(needed build_cmake_shared/app)
        if [[ " $n " == *" libarenagrad.so.$major "* ]]; then
            ok "cmake shared: find_package(arenagrad $major.$minor) (NEEDED: $n)"
            run cmake_shared build_cmake_shared/app
        else
            bad "cmake shared" "NEEDED does not name libarenagrad.so.$major: $n"
        fi
    else
        bad "cmake shared" "configure or build failed"
        show "$work/cmake_shared.log"
    fi
    if cm cmake_static -DARENAGRAD_USE_STATIC_LIBS=ON; then
        n=$(needed build_cmake_static/app)
        if [[ "$n" == *libarenagrad* ]]; then
            bad "cmake static" "links the shared library: NEEDED $n"
        else
            ok "cmake static: ARENAGRAD_USE_STATIC_LIBS=ON (NEEDED: $n)"
            run cmake_static build_cmake_static/app
        fi
    else
        bad "cmake static" "configure or build failed"
        show "$work/cmake_static.log"
    fi
    if cm cmake_wrong -DAG_REQUEST_VERSION="$((major + 1)).0"; then
        bad "cmake version" "find_package(arenagrad $((major + 1)).0) accepted $version"
    elif grep -q "$version" "$work/cmake_wrong.log"; then
        ok "cmake version: find_package(arenagrad $((major + 1)).0) refused (found $version)"
    else
        bad "cmake version" "refused, but the message does not name $version"
        show "$work/cmake_wrong.log"
    fi
fi

# --- uninstall ---------------------------------------------------------------
cd "$root" || exit 1
if make --no-print-directory uninstall PREFIX="$prefix" >"$work/uninstall.log" 2>&1 &&
    [ -z "$(find "$prefix" -type f -o -type l)" ]; then
    ok "uninstall removes every installed file"
else
    bad "uninstall" "files left: $(find "$prefix" -type f -o -type l | tr '\n' ' ')"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
