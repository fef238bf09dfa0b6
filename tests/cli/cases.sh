#!/bin/sh
# tests/cli/cases.sh - the command line of train_gpt, case by case.
#
#   sh tests/cli/cases.sh TRAIN_GPT MAKE_WEIGHTS CASE
#
# Each case_* function below is one CTest test (CMakeLists.txt reads their
# names from this file). A case runs the built train_gpt in a fresh
# temporary directory and asserts its exit status, the message it prints
# and, where the run was given an existing checkpoint to write, that the
# checkpoint is byte for byte what it was. Every message is also checked to
# say something after its last colon.
set -u
BIN=$1
MAKE_WEIGHTS=$2
CASE=$3
NAME=train_gpt
. "$(dirname "$0")/lib.sh"

# a small model that trains in a moment
TINY="--n-layer 1 --n-head 2 --n-embd 16 --block 16 --batch 4 --eval-iters 2 --log= --sample-tokens 0"

untouched() { cmp -s existing.st existing.orig || fail "the existing checkpoint was changed"; }

make_corpus() { write_corpus 300 "the quick brown fox jumps over the lazy dog, said she."; }

# existing.st: a small checkpoint (step 2); existing.orig: its copy
make_existing() {
    [ -f existing.orig ] && { cp existing.orig existing.st; return; }
    make_corpus
    run $TINY --data corpus.txt --steps 2 --save existing.st
    expect_rc 0
    cp existing.st existing.orig
}

# A usage error: exit status 2, the message, no checkpoint written.
usage_error() {
    expected=$1
    shift
    make_existing
    run --data corpus.txt --save existing.st "$@"
    expect_rc 2
    expect_msg "$expected"
    untouched
}

# ---- the cases at the top of issue 12 --------------------------------------------------

case_log_interval_zero() { usage_error "--log-interval 0 is out of range (allowed: an integer in [1, 2147483647])" --log-interval 0; }
case_eval_iters_zero() { usage_error "--eval-iters 0 is out of range (allowed: an integer in [1, 100000])" --eval-iters 0; }
case_grad_accum_zero() { usage_error "--grad-accum 0 is out of range (allowed: an integer in [1, 65536])" --grad-accum 0; }
case_lr_inf() { usage_error "--lr inf is out of range (allowed: a finite number > 0)" --lr inf; }
case_steps_overflow() { usage_error "--steps 4294967297 is out of range (allowed: an integer in [0, 2147483647])" --steps 4294967297; }
case_steps_zero_without_resume() { usage_error "--steps 0 trains nothing" --steps 0; }
case_batch_zero() { usage_error "--batch 0 is out of range (allowed: an integer in [1, 1048576])" --batch 0; }
case_block_zero() { usage_error "--block 0 is out of range" --block 0; }
case_threads_zero() { usage_error "--threads 0 is out of range (allowed: an integer in [1, 4096])" --threads 0; }

case_checkpoint_step_overflow() {
    make_existing
    "$MAKE_WEIGHTS" restep existing.st huge.st 4294967297 || fail "make_weights restep"
    run --resume huge.st --data corpus.txt --steps 5 --save existing.st
    expect_rc 1
    expect_msg "the checkpoint's step 4294967297 is outside [0, 2147483647]"
    untouched
}

case_save_in_missing_directory() {
    make_corpus
    run $TINY --data corpus.txt --steps 2 --save missing/dir/ckpt.st
    expect_rc 1
    expect_msg "--save missing/dir/ckpt.st: the directory missing/dir does not exist"
    expect_no_msg "step 1"
}

case_save_is_a_directory() {
    make_corpus
    mkdir adir
    run $TINY --data corpus.txt --steps 2 --save adir
    expect_rc 1
    expect_msg "--save adir is a directory"
}

# N straight against N/2, save, resume, N/2: the same losses, the same
# checkpoint bytes (tensors and metadata) and the same sample.
bitwise() {
    run --steps 6 --save a.st "$@" --log a.csv --sample-tokens 40
    expect_rc 0
    sed -n '/^---- sample/,/^----$/p' out.txt > a.sample
    run --steps 3 --decay-steps 6 --save b.st --sample-tokens 0 "$@" --log b.csv
    expect_rc 0
    run --resume b.st --steps 6 --save b.st --log b.csv --sample-tokens 40 $RESUME_EXTRA
    expect_rc 0
    expect_msg "resumed from b.st at step 3"
    sed -n '/^---- sample/,/^----$/p' out.txt > b.sample
    cut -d, -f1,2 a.csv > a.losses
    cut -d, -f1,2 b.csv > b.losses
    [ "$(wc -l < a.losses)" = 7 ] || fail "a.csv has $(wc -l < a.losses) lines"
    cmp -s a.losses b.losses || fail "the losses differ: $(diff a.losses b.losses | head -4)"
    cmp -s a.st b.st || fail "the checkpoints differ"
    [ -s a.sample ] || fail "no sample"
    cmp -s a.sample b.sample || fail "the samples differ"
}

case_resume_bitwise_defaults() {
    RESUME_EXTRA=""
    bitwise
}

case_resume_bitwise_dropout() {
    make_corpus
    RESUME_EXTRA="--data corpus.txt"
    bitwise $TINY --data corpus.txt --dropout 0.1 --eval-interval 3
}

case_resume_bitwise_bpe() {
    make_corpus
    RESUME_EXTRA="--data corpus.txt"
    bitwise $TINY --data corpus.txt --tokenizer bpe --vocab-size 300
}

case_resume_bitwise_grad_accum() {
    make_corpus
    RESUME_EXTRA="--data corpus.txt"
    bitwise $TINY --data corpus.txt --grad-accum 3 --dropout 0.1
}

# ---- signals -----------------------------------------------------------------------------

# Starts train_gpt in the background and waits until its output matches
# $1 (at most 600 s: the sanitizer build is slow).
start_and_wait() {
    pattern=$1
    shift
    rm -f out.txt
    "$BIN" "$@" > out.txt 2>&1 &
    PID=$!
    n=0
    until grep -q -- "$pattern" out.txt 2> /dev/null; do
        n=$((n + 1))
        [ $n -lt 30000 ] || { kill -9 $PID; fail "no '$pattern' within 600 s"; }
        kill -0 $PID 2> /dev/null || fail "train_gpt ended before '$pattern'"
        sleep 0.02
    done
}

case_sigint_saves_and_resumes() {
    # 3000 steps (about 2 s) so that the signal lands inside the run on a
    # loaded machine too (400 took 0.3 s, and a CI neighbour could let it end)
    make_corpus
    run $TINY --data corpus.txt --steps 3000 --save a.st
    expect_rc 0
    start_and_wait "^step 5/3000" $TINY --data corpus.txt --steps 3000 --save b.st --log-interval 1
    kill -INT $PID
    wait $PID
    RC=$?
    expect_rc 130
    expect_msg "SIGINT: stopped after step"
    expect_msg "saved b.st at step"
    expect_no_msg "saved b.st at step 3000"
    run --resume b.st --data corpus.txt --steps 3000 --save b.st
    expect_rc 0
    cmp -s a.st b.st || fail "interrupted and resumed differs from straight"
}

case_sigterm_saves() {
    make_corpus
    start_and_wait "^step 3/" $TINY --data corpus.txt --steps 100000 --save b.st --log-interval 1
    kill -TERM $PID
    wait $PID
    RC=$?
    expect_rc 143
    expect_msg "SIGTERM: stopped after step"
    expect_msg "saved b.st at step"
    run --resume b.st --data corpus.txt --steps 0
    expect_rc 0
}

case_second_signal_exits_at_once() {
    # The second signal has to arrive before the run has finished the step
    # the first one let it end. The case sends it as soon as the first is
    # acknowledged, but a loaded machine can delay this script past the end
    # of that step; when the output shows the run stopped on the first
    # signal alone (the second came too late to test anything), the case
    # starts again, at most three times.
    attempt=1
    while :; do
        make_existing
        # steps long enough that the second signal lands inside the first's step
        start_and_wait "^step 2/" --data corpus.txt --batch 32 --steps 100000 \
            --save existing.st --log-interval 1 --log= --eval-iters 1
        kill -INT $PID
        n=0
        until grep -q "signal again to exit now" out.txt; do
            n=$((n + 1))
            [ $n -lt 30000 ] || fail "the first signal was not acknowledged"
            sleep 0.01
        done
        kill -INT $PID
        wait $PID
        RC=$?
        PID=""
        grep -q "SIGINT: stopped after step" out.txt || break
        grep -q "second signal" out.txt && break
        [ $attempt -lt 3 ] || fail "the run ended on the first signal three times before the second came"
        attempt=$((attempt + 1))
    done
    expect_rc 130
    expect_msg "second signal: exiting now"
    expect_no_msg "saved existing.st"
    untouched
}

case_stale_temporary_removed() {
    make_existing
    touch existing.st.tmp.99999999 "existing.st.tmp.$$"
    run --resume existing.st --data corpus.txt --steps 3 --save existing.st
    expect_rc 0
    [ ! -e existing.st.tmp.99999999 ] || fail "the stale temporary file is still there"
    [ -e "existing.st.tmp.$$" ] || fail "a live process's temporary file was removed"
}

# ---- failures say why --------------------------------------------------------------------

case_non_finite_loss_stops() {
    make_existing
    run $TINY --data corpus.txt --steps 20 --lr 1e30 --save existing.st
    expect_rc 1
    expect_msg "step 2: the loss is"
    expect_msg "Stopped before the update, nothing saved"
    untouched
}

case_corpus_binary() {
    make_existing
    printf 'some text\000more' > binary.txt
    run $TINY --data binary.txt --steps 2 --save existing.st
    expect_rc 1
    expect_msg "binary.txt holds a NUL byte at offset 9"
    untouched
}

case_corpus_not_utf8() {
    make_existing
    cp corpus.txt latin1.txt
    printf 'caf\351\n' >> latin1.txt
    run $TINY --data latin1.txt --steps 2 --save existing.st
    expect_rc 1
    expect_msg "byte 0xe9 at offset"
    expect_msg "is not valid UTF-8"
    untouched
}

case_corpus_truncated_gzip() {
    make_existing
    gzip -c corpus.txt | head -c 200 > cut.gz
    run $TINY --data cut.gz --steps 2 --save existing.st
    expect_rc 1
    expect_msg "cut.gz is a truncated gzip file"
    untouched
}

case_corpus_directory_with_binary() {
    make_existing
    mkdir texts
    cp corpus.txt texts/a.txt
    printf '\001\002\377' > texts/b.bin
    run $TINY --data texts --steps 2 --save existing.st
    expect_rc 1
    expect_msg "texts/b.bin: byte 0xff at offset 2"
    untouched
}

case_corpus_missing() {
    make_existing
    run $TINY --data nowhere.txt --steps 2 --save existing.st
    expect_rc 1
    expect_msg "cannot open nowhere.txt"
    untouched
}

case_corpus_outside_vocabulary() {
    make_existing
    cp corpus.txt other.txt
    echo "ZEBRA~" >> other.txt
    run --resume existing.st --data other.txt --steps 4 --save existing.st
    expect_rc 1
    expect_msg "is not in the character vocabulary"
    untouched
}

case_prompt_outside_vocabulary() {
    make_existing
    run --resume existing.st --steps 0 --sample-tokens 10 --prompt "ZEBRA~" --save existing.st
    expect_rc 1
    expect_msg "--prompt: awl_tokenizer_encode: byte 0x5a 'Z' at offset 0 is not in the character vocabulary"
    untouched
}

case_bad_device() {
    make_existing
    run $TINY --data corpus.txt --steps 2 --device cuda:7 --save existing.st
    expect_rc 1
    expect_msg "--device"
    untouched
}

case_bf16_on_cpu() {
    make_existing
    run $TINY --data corpus.txt --steps 2 --precision bf16 --save existing.st
    expect_rc 1
    expect_msg "--precision bf16 needs --device cuda"
    untouched
}

case_usage_errors() {
    usage_error "unknown option '--stpes'" --stpes 3
    usage_error "--resume and --init-from exclude each other" --resume existing.st --init-from existing.st
    usage_error "--save: the path is empty" --save=
    run --data corpus.txt --save-interval 5
    expect_rc 2
    expect_msg "--save-interval 5 needs --save PATH"
    usage_error "--tokenizer 'word' is not allowed (allowed: one of char, bpe)" --tokenizer word
    usage_error "--seed -1 is out of range" --seed -1
    usage_error "--lr 'fast' is not a number" --lr fast
    usage_error "--dropout 1 is out of range (allowed: a number in [0, 1))" --dropout 1
    usage_error "--steps needs a value" --steps
}

# ---- resume ---------------------------------------------------------------------------

case_resume_contradicting_options() {
    make_existing
    run --resume existing.st --data corpus.txt --steps 4 --n-layer 3 --save existing.st
    expect_rc 1
    expect_msg "--n-layer 3 contradicts the checkpoint existing.st, whose model has n-layer 1"
    untouched
    run --resume existing.st --data corpus.txt --steps 4 --lr 0.5 --save existing.st
    expect_rc 1
    expect_msg "--lr 0.5 contradicts existing.st, which was trained with --lr 0.001"
    untouched
    run --resume existing.st --data corpus.txt --steps 4 --tokenizer bpe --save existing.st
    expect_rc 1
    expect_msg "--tokenizer bpe contradicts existing.st, which was trained with --tokenizer char"
    untouched
    # the same values are no contradiction
    run --resume existing.st --data corpus.txt --steps 3 --lr 0.001 --n-layer 1 --log=
    expect_rc 0
}

case_resume_banner_shows_checkpoint() {
    make_existing
    run --resume existing.st --data corpus.txt --steps 3 --log=
    expect_rc 0
    expect_msg "model: cpu-small (from the checkpoint)"
    expect_msg "(1 layers, 2 heads, width 16, block 16, vocab"
    expect_msg "schedule: lr 0.001, warmup 100 steps, cosine to 0.0001 at step 2, then constant"
}

case_resume_sample_without_corpus() {
    make_existing
    run --resume existing.st --steps 0 --data nowhere.txt --sample-tokens 20
    expect_rc 0
    expect_msg "---- sample"
}

case_resume_corrupt_metadata() {
    make_existing
    LC_ALL=C sed 's/"extra.lr":"0.001"/"extra.lr":"0.002"/' existing.st > edited.st
    cmp -s existing.st edited.st && fail "the edit did not apply"
    run --resume edited.st --data corpus.txt --steps 4 --save existing.st
    expect_rc 1
    expect_msg "the metadata is corrupt"
    untouched
}

case_resume_weights_only_file() {
    make_existing
    "$MAKE_WEIGHTS" torch existing.st torch.st F32 || fail "make_weights"
    run --resume torch.st --data corpus.txt --steps 4 --save existing.st
    expect_rc 1
    expect_msg "is not an awl checkpoint"
    untouched
}

# ---- PyTorch weights in ---------------------------------------------------------------

sample_of() { sed -n '/^---- sample/,/^----$/p' out.txt; }

case_init_from_pytorch_f32() {
    make_existing
    run --resume existing.st --steps 0 --sample-tokens 40
    expect_rc 0
    sample_of > want.sample
    "$MAKE_WEIGHTS" torch existing.st torch.st F32 head mask compiled || fail "make_weights"
    run --init-from torch.st --data corpus.txt --n-head 2 --steps 0 --sample-tokens 40
    expect_rc 0
    sample_of > got.sample
    [ -s want.sample ] && cmp -s want.sample got.sample || fail "the sample from the PyTorch file differs"
}

case_init_from_pytorch_bf16_f16() {
    make_existing
    for dtype in BF16 F16; do
        "$MAKE_WEIGHTS" torch existing.st torch.st $dtype || fail "make_weights"
        run --init-from torch.st --data corpus.txt --n-head 2 --steps 0 --sample-tokens 20
        expect_rc 0
        expect_msg "---- sample"
    done
    # and training from them, fresh optimizer, then resuming that run
    run --init-from torch.st --data corpus.txt --n-head 2 --steps 3 --save new.st --log= --eval-iters 1
    expect_rc 0
    expect_msg "model: torch.st (from the weights)"
    run --resume new.st --data corpus.txt --steps 4 --log=
    expect_rc 0
}

case_init_from_then_resume() {
    make_existing
    "$MAKE_WEIGHTS" torch existing.st torch.st F16 head || fail "make_weights"
    run --init-from torch.st --data corpus.txt --n-head 2 --steps 0 --sample-tokens 0 --save conv.st
    expect_rc 0
    expect_msg "saved conv.st at step 0"
    run --resume conv.st --data corpus.txt --steps 4 --log=
    expect_rc 0
    expect_msg "resumed from conv.st at step 0"
    expect_msg "cosine to 0.0001 at step 4"
}

case_init_from_untied_head() {
    make_existing
    "$MAKE_WEIGHTS" torch existing.st torch.st F32 untied || fail "make_weights"
    run --init-from torch.st --data corpus.txt --n-head 2 --steps 2 --save existing.st
    expect_rc 1
    expect_msg "lm_head.weight differs from transformer.wte.weight"
    untouched
}

case_init_from_awl_checkpoint() {
    make_existing
    # the tokenizer and the heads come from the checkpoint's metadata
    run --init-from existing.st --steps 2 --data corpus.txt --log=
    expect_rc 0
    expect_msg "(1 layers, 2 heads, width 16"
    run --init-from existing.st --n-layer 2 --steps 2 --data corpus.txt --save existing.st
    expect_rc 1
    expect_msg "--n-layer 2 contradicts the weights existing.st, whose model has n-layer 1"
    untouched
}

case_init_from_vocab_mismatch() {
    make_existing
    "$MAKE_WEIGHTS" torch existing.st torch.st F32 || fail "make_weights"
    echo "XYZ" > small.txt
    i=0
    while [ $i -lt 40 ]; do echo "XYZ XYZ ZYX" >> small.txt; i=$((i + 1)); done
    run --init-from torch.st --data small.txt --n-head 2 --steps 2 --save existing.st
    expect_rc 1
    expect_msg "the tokenizer has"
    untouched
}

# ---- data-parallel under awlrun -----------------------------------------------------------

AWLRUN=$(dirname "$BIN")/awlrun
# drun N ARGS...: train_gpt ARGS on N ranks under awlrun
drun() {
    n=$1
    shift
    "$AWLRUN" -n "$n" "$BIN" "$@" > out.txt 2>&1
    RC=$?
}

case_ddp_two_ranks() {
    make_corpus
    drun 2 $TINY --data corpus.txt --steps 6 --log a.csv --log-interval 1
    expect_rc 0
    expect_msg "[rank 0] data-parallel: 2 ranks over tcp, each 64 tokens a step"
    expect_msg "[rank 0] training: steps 1 to 6 of 128 tokens"
    expect_msg "comm "
    expect_no_msg "[rank 1] step"
    [ "$(wc -l < a.csv)" = 7 ] || fail "a.csv has $(wc -l < a.csv) lines"
}

# 8 steps straight on 2 ranks against 4, save, resume on 2 ranks, 4: the
# same losses and the same checkpoint bytes (every rank's streams are in
# it), with dropout and gradient accumulation (no_sync).
case_ddp_resume_bitwise() {
    make_corpus
    set -- $TINY --data corpus.txt --dropout 0.1 --grad-accum 2
    drun 2 "$@" --steps 8 --save a.st --log a.csv
    expect_rc 0
    drun 2 "$@" --steps 4 --decay-steps 8 --save b.st --log b.csv
    expect_rc 0
    drun 2 --resume b.st --data corpus.txt --steps 8 --save b.st --log b.csv
    expect_rc 0
    expect_msg "[rank 0] resumed from b.st at step 4"
    cut -d, -f1,2 a.csv > a.losses
    cut -d, -f1,2 b.csv > b.losses
    cmp -s a.losses b.losses || fail "the losses differ: $(diff a.losses b.losses | head -4)"
    cmp -s a.st b.st || fail "the checkpoints differ"
}

# A checkpoint of 2 ranks resumed by one process: rank 0's streams go on,
# and the run says it is not a bitwise continuation.
case_ddp_resume_other_world_size() {
    make_corpus
    drun 2 $TINY --data corpus.txt --steps 3 --save b.st
    expect_rc 0
    run --resume b.st --data corpus.txt --steps 5 --save b.st
    expect_rc 0
    expect_msg "written by a run of another number of ranks"
}

# SIGINT to awlrun reaches both ranks; they stop after the same step and
# rank 0 saves.
case_ddp_sigint_saves() {
    make_corpus
    rm -f out.txt
    "$AWLRUN" -n 2 "$BIN" $TINY --data corpus.txt --steps 100000 --save b.st --log-interval 1 \
        > out.txt 2>&1 &
    PID=$!
    n=0
    until grep -q "step 3/" out.txt 2> /dev/null; do
        n=$((n + 1))
        [ $n -lt 6000 ] || fail "no step 3 within 120 s"
        sleep 0.02
    done
    kill -INT $PID
    wait $PID
    RC=$?
    expect_rc 130
    expect_msg "[rank 0] train_gpt: SIGINT: stopped after step"
    expect_msg "[rank 0] saved b.st at step"
    [ -s b.st ] || fail "no checkpoint"
}

# ZeRO and tensor parallelism: 6 steps straight against 3, save, resume, 3:
# the same losses and the same checkpoint bytes (one consolidated file,
# re-sharded or re-cut on resume).
parallel_bitwise() {
    make_corpus
    n=$1
    shift
    set -- $TINY --n-head 2 --data corpus.txt --dropout 0.1 "$@"
    drun $n "$@" --steps 6 --save a.st --log a.csv
    expect_rc 0
    drun $n "$@" --steps 3 --decay-steps 6 --save b.st --log b.csv
    expect_rc 0
    drun $n "$@" --resume b.st --steps 6 --save b.st --log b.csv
    expect_rc 0
    cut -d, -f1,2 a.csv > a.losses
    cut -d, -f1,2 b.csv > b.losses
    cmp -s a.losses b.losses || fail "the losses differ: $(diff a.losses b.losses | head -4)"
    cmp -s a.st b.st || fail "the checkpoints differ"
}

case_zero_resume_bitwise() {
    parallel_bitwise 2 --zero 2 --grad-accum 2
    expect_msg "ZeRO stage 2: each rank keeps 1/2 of the optimizer state and of the gradients"
    expect_msg "[rank 0] memory (rank 0): parameters"
    # one process takes the consolidated checkpoint as it is
    run --resume b.st --data corpus.txt --steps 8 --save c.st
    expect_rc 0
}

case_tensor_parallel_resume_bitwise() {
    parallel_bitwise 2 --tensor-parallel 2 --checkpoint-activations
    expect_msg "1 data-parallel replicas of 2 tensor-parallel ranks"
}

case_data_by_tensor_parallel() {
    make_corpus
    drun 4 $TINY --n-head 2 --data corpus.txt --steps 4 --tensor-parallel 2 --grad-accum 2 \
        --baseline-tokens-per-s 1000
    expect_rc 0
    expect_msg "2 data-parallel replicas of 2 tensor-parallel ranks"
    expect_msg "[rank 0] scaling: "
}

case_parallel_option_errors() {
    make_corpus
    drun 2 $TINY --data corpus.txt --steps 2 --tensor-parallel 3
    expect_rc 1
    expect_msg "--tensor-parallel 3 does not divide the 2 ranks"
    run $TINY --data corpus.txt --steps 2 --zero 1
    expect_rc 1
    expect_msg "--zero needs several ranks: start the run with awlrun -n N"
    run $TINY --data corpus.txt --steps 2 --zero 1 --tensor-parallel 2
    expect_rc 2
    expect_msg "--zero 1 and --tensor-parallel 2 exclude each other"
    run $TINY --data corpus.txt --steps 2 --zero 3
    expect_rc 2
    expect_msg "--zero 3 is out of range"
}

# ---- the profiler and the memory ledger (docs/profiling.md) ------------------------------

case_profile_option_errors() {
    make_corpus
    run $TINY --data corpus.txt --steps 6 --profile t.json --profile-steps 5:2
    expect_rc 2
    expect_msg "--profile-steps 5:2: expected A:B, the first and the last step to record (1 <= A <= B)"
    run $TINY --data corpus.txt --steps 6 --profile t.json --profile-steps 3
    expect_rc 2
    expect_msg "--profile-steps 3: expected A:B"
    run $TINY --data corpus.txt --steps 4 --profile t.json --profile-steps 2:9
    expect_rc 2
    expect_msg "--profile-steps 2:9: the run ends at step 4 (--steps)"
    run $TINY --data corpus.txt --steps 4 --profile-steps 2:3
    expect_rc 2
    expect_msg "--profile-steps 2:3 needs --profile PATH"
    run $TINY --data corpus.txt --steps 2 --profile missing/dir/t.json
    expect_rc 1
    expect_msg "--profile missing/dir/t.json: the directory missing/dir does not exist"
    [ -e t.json ] && fail "a trace was written"
    run $TINY --data corpus.txt --steps 2 --save r.st
    run $TINY --data corpus.txt --resume r.st --steps 4 --profile t.json --profile-steps 1:2
    expect_rc 0
    expect_msg "--profile-steps 1:2: the run starts at step 3, after step 1: nothing is recorded"
    [ -e t.json ] && fail "a trace was written"
    return 0
}

case_profile_writes_trace() {
    make_corpus
    run $TINY --data corpus.txt --steps 4 --profile t.json --profile-steps 2:3 --memory-ledger \
        --log-interval 1 --log log.csv
    expect_rc 0
    expect_msg "profile: steps 2 to 3 in t.json"
    expect_msg "profile: 2 steps,"
    expect_msg "matmul"
    expect_msg "ceilings on cpu (measured in this process)"
    expect_msg "memory step 3: with psi = 4224 parameters: parameters 16896 = 4 psi, gradients 16896 = 4 psi, optimizer state 33792 = 8 psi"
    if grep -qE 'MFU [0-9]{3,}\.' out.txt; then fail "MFU at or above 100%"; fi
    grep -q '"cat":"kernel"' t.json || fail "no kernel in the trace"
    grep -q '"name":"backward","cat":"phase"' t.json || fail "no backward phase in the trace"
    head -1 t.summary.tsv | grep -q '^# device cpu' || fail "no summary"
    expect_no_msg "nothing is recorded"
    head -1 log.csv | grep -q ',mem_activations,' || fail "no ledger columns in the log"
    [ "$(tail -1 log.csv | tr ',' '\n' | wc -l)" = "$(head -1 log.csv | tr ',' '\n' | wc -l)" ] ||
        fail "the log's rows and header differ in columns"
}

"case_$CASE"
echo "PASS [$CASE]"
