#!/bin/sh
# scripts/check_docs.sh - fails when the docs name a raw result file that
# docs/results does not have: CTest runs it as the test `docs`.
#
#   sh scripts/check_docs.sh          # from the repository root
#
# Every figure in the docs names the raw file it comes from, in one of
# three forms; each must match at least one file:
#   docs/results/NAME, in backquotes or not (globs such as * and {a,b}
#     allowed),
#   `NAME`, where NAME starts as result files do (dev-, h100-, h200-),
#   `-SUFFIX`, short for a file named just before it: any file of
#     docs/results ending in SUFFIX.
# Names of other files (`train_log.csv`, `trace.json`) are not checked.
# On failure it prints "file:line: what" for each name that matches nothing.
set -u
cd "$(dirname "$0")/.." || exit 1

# A file of docs/results matches the pattern $1 (a glob, with {a,b} read
# as *).
matches() {
    pattern=$(printf '%s' "$1" | sed 's/{[^}]*}/*/g')
    for f in $pattern; do
        [ -e "$f" ] && return 0
    done
    return 1
}

ext='(jsonl|txt|csv|json|png)'
names="\`[^\` ]+\\.$ext\`|docs/results/[A-Za-z0-9_.*{},-]+\\.$ext"
failures=$(
    for doc in README.md docs/*.md; do
        grep -noE "$names" "$doc" | while IFS= read -r hit; do
            line=${hit%%:*}
            name=$(printf '%s' "${hit#*:}" | tr -d '`')
            case $name in
                docs/results/*) pattern=$name ;;
                -*) pattern="docs/results/*$name" ;;
                dev-* | h100-* | h200-* | h100_* | h200_*) pattern="docs/results/$name" ;;
                *) continue ;;
            esac
            matches "$pattern" || echo "$doc:$line: $name matches no file of docs/results"
        done
    done
)
if [ -n "$failures" ]; then
    echo "$failures"
    exit 1
fi
echo "docs: every raw file the docs name is in docs/results"
