#!/bin/sh
# scripts/check_layers.sh - fails when a file breaks awl's layering
# (docs/architecture.md): CTest runs it as the test `layers`.
#
#   sh scripts/check_layers.sh        # from the repository root
#
# Three rules, each a list of "file:line: what" on failure:
#   1. includes point downward: a file includes headers of its own layer
#      and the layers below it only (common < backends < tensor < autograd
#      < nn < dist; data sits on tensor); a backend folder (backends/cpu, ...) includes only
#      itself and backends/*.h; a private header (*_internal.h, *.cuh) only
#      from its own folder;
#   2. only tensor/ calls a backend table: nn/, autograd/, data/ and dist/
#      name no awl_backend, awl_view, awl_tensor_backend, awl_tensor_view and
#      follow no `backend` pointer (comments do not count);
#   3. tensor/ names no backend: it iterates the registry.
set -u
cd "$(dirname "$0")/.." || exit 1
status=0
fail() {
    echo "$1"
    status=1
}

# The folders a file in $1 may include from.
allowed_for() {
    case $1 in
        common) echo "common" ;;
        backends) echo "common backends" ;;
        tensor) echo "common backends tensor" ;;
        autograd) echo "common backends tensor autograd" ;;
        nn) echo "common backends tensor autograd nn" ;;
        data) echo "common backends tensor data" ;;
        dist) echo "common backends tensor autograd nn dist" ;;
    esac
}

for layer in common backends tensor autograd nn data dist; do
    [ -d "$layer" ] || continue
    allowed=$(allowed_for "$layer")
    for f in $(find "$layer" -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | sort); do
        dir=$(dirname "$f")
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r hit; do
            line=${hit%%:*}
            inc=$(printf '%s\n' "$hit" | sed 's/^[^"]*"\([^"]*\)".*/\1/')
            top=${inc%%/*}
            [ "$top" = "$inc" ] && continue # a file beside it, or awl.h
            ok=0
            for a in $allowed; do
                case $a in
                    */*) [ "$inc" = "$a" ] && ok=1 ;;
                    *) [ "$top" = "$a" ] && ok=1 ;;
                esac
            done
            [ $ok = 1 ] || echo "$f:$line: includes $inc, from a layer above $layer/"
            # a backend's folder (and its subfolders): itself and
            # backends/*.h only
            case $dir in backends/*)
                case $inc in
                    backends/*/*)
                        own=$(echo "$dir" | cut -d/ -f1-2)
                        case ${inc%/*} in "$own" | "$own"/*) ;;
                            *) echo "$f:$line: includes $inc, another backend's file" ;;
                        esac ;;
                esac ;;
            esac
            case $inc in *_internal.h | *.cuh)
                case $dir in "${inc%/*}" | "${inc%/*}"/*) ;;
                    *) echo "$f:$line: includes $inc, private to ${inc%/*}/" ;;
                esac ;;
            esac
        done
    done
done > /tmp/awl_layers.$$
[ -s /tmp/awl_layers.$$ ] && { cat /tmp/awl_layers.$$; status=1; }
rm -f /tmp/awl_layers.$$

# Code without its comments (gcc's preprocessor, includes and macros
# untouched), with its line numbers kept.
code_of() {
    gcc -fpreprocessed -dD -E -x c "$1" 2>/dev/null | awk '
        /^# [0-9]+ / { n = $2 - 1; next }
        { n++; print n ":" $0 }'
}

for layer in nn autograd data dist; do
    [ -d "$layer" ] || continue
    for f in $(find "$layer" -name '*.[ch]' | sort); do
        code_of "$f" |
            grep -E '\b(awl_backend|awl_backend_[a-z_]+|awl_view|awl_tensor_backend|awl_tensor_view|awl_cpu_backend|awl_cuda_backend)\b|(->|\.)[[:space:]]*backend[[:space:]]*->' |
            while IFS= read -r hit; do
                fail "$f:${hit%%:*}: reaches a backend table (only tensor/ may): ${hit#*:}"
            done
    done
done > /tmp/awl_layers.$$
[ -s /tmp/awl_layers.$$ ] && { cat /tmp/awl_layers.$$; status=1; }
rm -f /tmp/awl_layers.$$

for f in $(find tensor -name '*.[ch]' | sort); do
    code_of "$f" | grep -E '\b(awl_cpu_backend|awl_cuda_backend)\b|"cuda' |
        while IFS= read -r hit; do
            fail "$f:${hit%%:*}: names a backend (iterate the registry instead): ${hit#*:}"
        done
done > /tmp/awl_layers.$$
[ -s /tmp/awl_layers.$$ ] && { cat /tmp/awl_layers.$$; status=1; }
rm -f /tmp/awl_layers.$$

[ $status = 0 ] && echo "layers: every include points downward; only tensor/ calls backend tables"
exit $status
