#!/bin/sh
# scripts/check_symbols.sh - fails when libawl.a defines a global symbol
# outside awl's namespace: CTest runs it as the test `symbols`.
#
#   sh scripts/check_symbols.sh build/libawl.a
#
# A program that links the static library with code of its own must not
# meet a second net_connect or store_close: every function and variable
# that the library exports starts with awl_ (awlc_ in the CUDA backend).
# Names the compilers make (a leading _ or ., DW.ref. for the C++ runtime)
# and weak symbols (NVTX's header-only globals, which every object that
# includes the header may define) do not count. Prints each other name with the object that defines it.
set -u
lib=${1:?usage: check_symbols.sh LIBAWL.a}
out=$(nm -g --defined-only "$lib") || { echo "nm failed on $lib"; exit 1; }
bad=$(printf '%s\n' "$out" | awk '
    /:$/ { obj = $1; next }
    NF == 3 && $2 ~ /^[TDBRCGS]$/ && $3 !~ /^(awl_|awlc_|_|\.|DW\.ref\.)/ { print obj " " $3 }')
if [ -n "$bad" ]; then
    printf '%s\n' "$bad"
    echo "check_symbols: $(printf '%s\n' "$bad" | wc -l) global symbols without the awl_ prefix in $lib"
    exit 1
fi
echo "check_symbols: every global symbol of $lib starts with awl_ or awlc_"
