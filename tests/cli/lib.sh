# tests/cli/lib.sh - what the case scripts of tests/cli share (cases.sh for
# train_gpt, generate_cases.sh for generate). A script sets
#
#   BIN   the program under test
#   CASE  the case it runs
#   NAME  the program's name, which opens every message it prints
#
# and then sources this file, which moves into a fresh temporary directory
# (removed at exit unless AWL_CLI_KEEP is set; a run left in the background
# in $PID is killed first) and gives the case functions:
#
#   run ARGS...         $BIN ARGS, its output in out.txt and its status in RC;
#                       fails when a message ends without saying why
#   expect_rc N         RC is N
#   expect_msg TEXT     out.txt has a line containing TEXT
#   expect_no_msg TEXT  out.txt has none
#   fail WHY...         ends the case, showing the last run's output
#   write_corpus N TEXT corpus.txt: N lines "line <i>: TEXT"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/awl_${NAME}_cli.XXXXXX")
PID=""
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2> /dev/null
    [ -n "${AWL_CLI_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK" || exit 1

fail() {
    echo "FAIL [$CASE]: $*"
    echo "---- output of the last run:"
    cat out.txt 2>/dev/null
    exit 1
}

run() {
    "$BIN" "$@" > out.txt 2>&1
    RC=$?
    if grep -q "^$NAME: .*: *\$" out.txt; then fail "a message ends without saying why"; fi
}

expect_rc() { [ "$RC" = "$1" ] || fail "exit status $RC, expected $1"; }
expect_msg() { grep -qF -- "$1" out.txt || fail "no message containing: $1"; }
expect_no_msg() { if grep -qF -- "$1" out.txt; then fail "unexpected: $1"; fi; }

write_corpus() {
    i=0
    : > corpus.txt
    while [ $i -lt "$1" ]; do
        echo "line $i: $2" >> corpus.txt
        i=$((i + 1))
    done
}
