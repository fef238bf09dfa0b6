#!/bin/sh
# tests/cli/generate_cases.sh - the command line of examples/generate, case by case.
#
#   sh tests/cli/generate_cases.sh GENERATE TRAIN_GPT MAKE_WEIGHTS CASE
#
# Each case_* function below is one CTest test (CMakeLists.txt reads their
# names from this file), run in a fresh temporary directory. Usage errors
# must exit with status 2 and name the option and what it allows; a run
# must print the prompt and its continuation, then the tokens/s line. (No
# unbalanced square bracket on a case line: CMake reads the file as a list.)
set -u
BIN=$1
TRAIN_GPT=$2
MAKE_WEIGHTS=$3
CASE=$4
NAME=generate
. "$(dirname "$0")/lib.sh"

# ckpt.st: a tiny model, two steps of train_gpt on a small corpus
make_checkpoint() {
    write_corpus 200 "the quick brown fox jumps over the lazy dog."
    "$TRAIN_GPT" --n-layer 1 --n-head 2 --n-embd 16 --block 16 --batch 4 --eval-iters 1 \
        --log= --sample-tokens 0 --data corpus.txt --steps 2 --save ckpt.st > train.txt 2>&1 ||
        { cat train.txt; fail "train_gpt could not make the checkpoint"; }
}

usage_error() {
    expected=$1
    shift
    run "$@"
    expect_rc 2
    expect_msg "$expected"
}

# ---- usage errors: every option's range, and the combinations ---------------------------

case_top_p_zero() { usage_error "--top-p 0 is out of range (allowed: a number in (0, 1" --config cpu-small --prompt-ids 1 --top-p 0; }
case_top_p_above_one() { usage_error "--top-p 1.5 is out of range (allowed: a number in (0, 1" --config cpu-small --prompt-ids 1 --top-p 1.5; }
case_temperature_negative() { usage_error "--temperature -1 is out of range (allowed: a number in [0, 100])" --config cpu-small --prompt-ids 1 --temperature -1; }
case_temperature_nan() { usage_error "--temperature nan is out of range" --config cpu-small --prompt-ids 1 --temperature nan; }
case_max_new_tokens_zero() { usage_error "--max-new-tokens 0 is out of range (allowed: an integer in [1, 1048576])" --config cpu-small --prompt-ids 1 --max-new-tokens 0; }
case_top_k_negative() { usage_error "--top-k -1 is out of range (allowed: an integer in [0, 2147483647])" --config cpu-small --prompt-ids 1 --top-k -1; }
case_top_k_not_integer() { usage_error "--top-k '5x' is not an integer" --config cpu-small --prompt-ids 1 --top-k 5x; }
case_seed_overflow() { usage_error "--seed 99999999999999999999 is out of range" --config cpu-small --prompt-ids 1 --seed 99999999999999999999; }
case_unknown_option() { usage_error "unknown option '--beam' (see --help)" --config cpu-small --prompt-ids 1 --beam 4; }
case_missing_value() { usage_error "--prompt needs a value" --config cpu-small --prompt; }
case_flag_with_value() { usage_error "--no-cache takes no value" --config cpu-small --prompt-ids 1 --no-cache=yes; }
case_bad_config() { usage_error "--config 'gpt5' is not allowed (allowed: one of cpu-small, cpu-medium, shakespeare-char, gpt2-124m)" --config gpt5 --prompt-ids 1; }
case_no_model() { usage_error "give exactly one of --checkpoint PATH, --init-from PATH and --config NAME (0 given)" --prompt-ids 1; }
case_two_models() { usage_error "(2 given)" --config cpu-small --init-from x.st --prompt-ids 1; }
case_no_prompt() { usage_error "give --prompt TEXT (one or more) or --prompt-ids LIST, not neither" --config cpu-small; }
case_both_prompts() { usage_error "not both" --config cpu-small --prompt a --prompt-ids 1; }
case_empty_prompt() { usage_error "--prompt 2 is empty" --config cpu-small --prompt a --prompt ""; }
case_stop_and_stop_id() { usage_error "--stop and --stop-id 3 exclude each other" --config cpu-small --prompt-ids 1 --stop a --stop-id 3; }
case_n_head_without_init_from() { usage_error "--n-head is for --init-from" --config cpu-small --prompt-ids 1 --n-head 4; }
case_bf16_on_cpu() { usage_error "--precision bf16 needs --device cuda" --config cpu-small --prompt-ids 1 --precision bf16; }
case_prompt_ids_outside_vocab() { usage_error "--prompt-ids '1,65': expected comma-separated token ids in" --config cpu-small --prompt-ids 1,65; }
case_prompt_ids_malformed() { usage_error "--prompt-ids '1,,2'" --config cpu-small --prompt-ids 1,,2; }
case_prompt_without_tokenizer() { usage_error "--prompt needs a tokenizer, and the model has none" --config cpu-small --prompt hello; }
case_stop_id_outside_vocab() { usage_error "--stop-id 65 is outside the model's vocabulary" --config cpu-small --prompt-ids 1 --stop-id 65; }

case_stop_of_two_tokens() {
    make_checkpoint
    usage_error "--stop 'ab' is 2 tokens for this tokenizer: it must be one" --checkpoint ckpt.st --prompt line --stop ab
}

case_prompt_outside_tokenizer() {
    make_checkpoint
    usage_error "--prompt 1" --checkpoint ckpt.st --prompt "Zebra"
}

# a device the build or the machine does not have
case_device_missing() {
    run --config cpu-small --prompt-ids 1 --device cuda:99
    expect_rc 1
    expect_msg "generate: --device"
    expect_msg "cuda:99" # "unknown device" without CUDA, "no such device" without the GPU
}

case_checkpoint_missing() {
    run --checkpoint missing.st --prompt a
    expect_rc 1
    expect_msg "--checkpoint: "
    expect_msg "missing.st"
}

# weights alone (as PyTorch writes them) are --init-from's, not --checkpoint's
case_checkpoint_without_tokenizer() {
    make_checkpoint
    "$MAKE_WEIGHTS" torch ckpt.st torch.st F32 || fail "make_weights"
    run --checkpoint torch.st --prompt line
    expect_rc 1
    expect_msg "--checkpoint torch.st: the file has no model configuration: --init-from reads weights alone"
    run --init-from torch.st --n-head 2 --prompt-ids 1,2,3 --max-new-tokens 5
    expect_rc 0
    expect_msg "decode 4 tokens"
}

# ---- runs ------------------------------------------------------------------------------

case_checkpoint_generates() {
    make_checkpoint
    run --checkpoint ckpt.st --prompt "line 1" --max-new-tokens 20 --seed 3
    expect_rc 0
    head -c 6 out.txt | grep -qF "line 1" || fail "the output does not start with the prompt"
    expect_msg "generate: prompt 6 tokens in"
    expect_msg "decode 19 tokens in"
    expect_msg "key/value cache, cpu"
}

# greedy: the cache and the full recompute print the same text
case_cache_matches_no_cache() {
    make_checkpoint
    run --checkpoint ckpt.st --prompt "line" --max-new-tokens 12 --temperature 0
    expect_rc 0
    head -n 1 out.txt > cached.txt
    run --checkpoint ckpt.st --prompt "line" --max-new-tokens 12 --temperature 0 --no-cache
    expect_rc 0
    expect_msg "no cache (--no-cache)"
    head -n 1 out.txt > recomputed.txt
    cmp -s cached.txt recomputed.txt || fail "cached and recomputed text differ: $(cat cached.txt) / $(cat recomputed.txt)"
}

case_batch_of_prompts() {
    make_checkpoint
    run --checkpoint ckpt.st --prompt "line" --prompt "the quick" --max-new-tokens 8 --top-p 0.9
    expect_rc 0
    expect_msg "---- prompt 1 ----"
    expect_msg "---- prompt 2 ----"
    expect_msg "the quick"
    expect_msg "generate: prompt 13 tokens in"
    expect_msg "decode 14 tokens in"
}

# a row ends after its stop token: at most one space after the prompt, at the end
case_stop_token() {
    make_checkpoint
    run --checkpoint ckpt.st --prompt "line" --max-new-tokens 200 --temperature 1 --top-k 0 --stop " "
    expect_rc 0
    text=$(head -n 1 out.txt)
    rest=${text#line}
    case "$rest" in
        *" "?*) fail "text continues after the stop token: '$rest'" ;;
        *" ") ;;
        *) fail "no stop token in 200 tokens: '$rest'" ;;
    esac
}

case_help() {
    run --help
    expect_rc 0
    expect_msg "--top-p X"
    expect_msg "a number in (0, 1"
}

[ "$(type "case_$CASE" 2>/dev/null | head -n 1)" ] || fail "no such case"
"case_$CASE"
echo "ok [$CASE]"
