# awl's front door: thin targets over scripts/setup.sh and CMake.
#
#   make train   set up, build, and train the default GPT (cpu-small)
#   make test    set up, build, and run the test suite
#   make asan    the test suite under AddressSanitizer + UBSan
#   make bench   the benchmark programs (JSON lines)
#
# Every target is idempotent; when everything is installed and built it only
# re-runs what changed.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build train test asan bench clean format

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

asan: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAWL_SANITIZE=ON -DAWL_WITH_CUDA=OFF > /dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j 2

bench: build
	./$(BUILD)/bench_tensor
	./$(BUILD)/bench_gpt

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-asan
