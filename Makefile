# awl's front door: thin targets over scripts/setup.sh and CMake.
#
#   make train   set up, build, and train the default GPT (cpu-small)
#   make test    set up, build, and run the test suite (and test-student)
#   make test-student  the student backend's solution, built on its own
#                (build-student): awl-check passes and cpu-small trains
#   make asan    the test suite under AddressSanitizer + UBSan
#   make fuzz    the libFuzzer targets, FUZZ_SECONDS each (clang)
#   make bench   the benchmark programs (JSON lines)
#
# On a machine without make, `sh scripts/setup.sh` installs it first (the
# README's commands do that).
#
# Every target is idempotent; when everything is installed and built it only
# re-runs what changed.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 20
FUZZERS = fuzz_safetensors fuzz_checkpoint_meta fuzz_tokenizer fuzz_corpus

.PHONY: all setup build train test test-student asan fuzz bench clean format

all: build

setup:
	@./scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

train: build
	./$(BUILD)/train_gpt

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2
	@$(MAKE) --no-print-directory test-student

# The kit as an instructor hands it out has no backends/student/solution:
# then there is nothing to build here.
test-student: setup
	@if [ -d backends/student/solution ]; then \
		cmake -S . -B build-student -DCMAKE_BUILD_TYPE=Release -DAWL_WITH_CUDA=OFF \
			-DAWL_STUDENT_SOLUTION=ON > /dev/null && \
		cmake --build build-student -j $(JOBS) --target awl-check train_gpt test_student && \
		cd build-student && ctest --output-on-failure -L student; \
	else echo "test-student: no backends/student/solution here: skipped"; fi

# without the MPI transport: Open MPI's own start-up allocations never get
# freed, and LeakSanitizer would report them against every test
asan: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAWL_SANITIZE=ON -DAWL_WITH_CUDA=OFF -DAWL_WITH_MPI=OFF > /dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j 2

# Each target runs FUZZ_SECONDS from its seeds (tests/fuzz/seeds/<target>),
# adding what it finds to build-fuzz/corpus/<target>; a crash, a leak or a
# sanitizer report fails the target.
fuzz: setup
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAWL_FUZZ=ON \
		-DAWL_SANITIZE=ON -DAWL_WITH_CUDA=OFF -DAWL_WITH_MPI=OFF > /dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	@for f in $(FUZZERS); do \
		mkdir -p build-fuzz/corpus/$$f; \
		if OMP_NUM_THREADS=1 ./build-fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
			-print_final_stats=1 -artifact_prefix=build-fuzz/$$f- \
			build-fuzz/corpus/$$f tests/fuzz/seeds/$$f > build-fuzz/$$f.log 2>&1; then \
			echo "$$f: $$(grep -h 'number_of_executed_units' build-fuzz/$$f.log), no crash, no leak"; \
		else \
			tail -40 build-fuzz/$$f.log; exit 1; \
		fi; \
	done

bench: build
	./$(BUILD)/bench_tensor
	./$(BUILD)/bench_gpt

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-student
