#!/bin/sh
# tests/install/test_install.sh - install awl into a temporary prefix and
# build a program against the installed copy, outside the source tree.
#
#   sh tests/install/test_install.sh BUILD_DIR C_COMPILER [SANITIZE]
#
# Checks: the headers under include/awl, the static library, the shared
# library with its versioned SONAME (libawl.so.<major>), the programs in
# bin; tests/install/hello.c built with pkg-config (awl.pc) and run, and so
# the README's library example for two of its steps; then hello.c built by
# tests/install/consumer with find_package(awl) against awl::awl and
# awl::awl_static, and run. Exit 77 (skipped) in a sanitizer build.
set -eu
BUILD=$1
CC=$2
case "${3:-OFF}" in ON | TRUE | 1) echo "install: skipped in the sanitizer build"; exit 77 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/awl_install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix

fail() { echo "FAIL [install]: $*"; exit 1; }

cmake --install "$BUILD" --prefix "$PREFIX" > "$WORK/install.log" || { cat "$WORK/install.log"; fail "cmake --install"; }
LIBDIR=$(dirname "$(find "$PREFIX" -name awl.pc)")/..
[ -f "$PREFIX/include/awl/awl.h" ] || fail "no include/awl/awl.h"
[ -f "$PREFIX/include/awl/nn/generate.h" ] || fail "no include/awl/nn/generate.h"
[ -f "$LIBDIR/libawl.a" ] || fail "no libawl.a"
for p in train_gpt generate awlrun awl-check; do [ -x "$PREFIX/bin/$p" ] || fail "no bin/$p"; done
soname=$(readelf -d "$LIBDIR/libawl.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
case "$soname" in libawl.so.[0-9]*) ;; *) fail "the shared library's SONAME is '$soname'" ;; esac
[ -f "$LIBDIR/$soname" ] || fail "no $soname beside libawl.so"
# it exports awl's names only (cmake/awl.map)
others=$(nm -D --defined-only "$LIBDIR/libawl.so" | awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^awl_/ {print $3}' | head -5)
[ -z "$others" ] || fail "libawl.so exports names without the awl_ prefix: $others"

# pkg-config, from a directory that is not the source tree
cd "$WORK"
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
pkg-config --exists awl || fail "pkg-config does not find awl.pc"
# shellcheck disable=SC2046
"$CC" -std=c11 $(pkg-config --cflags awl) "$HERE/hello.c" -o hello_pc $(pkg-config --libs awl) ||
    fail "building with pkg-config"
LD_LIBRARY_PATH="$LIBDIR" ./hello_pc > pc.txt || fail "hello (pkg-config): $(cat pc.txt)"
grep -q "^hello awl: sum 54, tokens 1 2" pc.txt || fail "hello (pkg-config) printed: $(cat pc.txt)"
ldd ./hello_pc | grep -q "$soname" || fail "hello (pkg-config) does not load $soname"

# The README's example ("Using the library"): its C block put inside
# main() and its loop cut from 2000 steps to 2, built with pkg-config and
# warnings as errors, run on a small input.txt. The README's code stays
# code that builds against an installed awl and trains.
awk '/^## Using the library/ {on = 1} on && /^```c/ {code = 1; next} code && /^```/ {exit} code' \
    "$HERE/../../README.md" > readme_block.c
grep -q 'for (int step = 0; step < 2000; step++)' readme_block.c ||
    fail "README.md: no loop of 2000 steps in the C block under '## Using the library'"
{
    grep '^#include' readme_block.c
    printf '#include <stdio.h>\n\nint main(void)\n{\n'
    grep -v '^#include' readme_block.c | sed 's/step < 2000;/step < 2;/'
    printf '    return 0;\n}\n'
} > readme_example.c
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags awl) readme_example.c -o readme_example \
    $(pkg-config --libs awl) || fail "building the README's example (readme_example.c)"
awk 'BEGIN {for (i = 0; i < 200; i++) print "the quick brown fox jumps over the lazy dog, said she."}' \
    > input.txt
LD_LIBRARY_PATH="$LIBDIR" ./readme_example > readme.txt 2>&1 ||
    fail "the README's example: $(cat readme.txt)"

# find_package(awl), the shared and the static library
cmake -S "$HERE/consumer" -B consumer -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$PREFIX" \
    > consumer.log 2>&1 || { cat consumer.log; fail "configuring with find_package(awl)"; }
cmake --build consumer > build.log 2>&1 || { cat build.log; fail "building with find_package(awl)"; }
for p in hello hello_static; do
    ./consumer/$p > $p.txt || fail "$p (find_package): $(cat $p.txt)"
    grep -q "^hello awl: sum 54, tokens 1 2" $p.txt || fail "$p printed: $(cat $p.txt)"
done
if ldd ./consumer/hello_static | grep -q libawl; then fail "hello_static loads libawl.so"; fi
echo "install: ok ($soname, pkg-config, the README's example and find_package)"
