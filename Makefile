# awl's front door: thin targets over scripts/setup.sh and CMake.
#
#   make train   set up, build, and train the default GPT (cpu-small)
#   make test    set up, build, and run the test suite (and test-student)
#   make test-student  the student backend's solution, built on its own
#                (build-student): awl-check passes and cpu-small trains
#   make asan    the test suite under AddressSanitizer + UBSan
#   make bench   the benchmark programs (JSON lines)
#
# Every target is idempotent; when everything is installed and built it only
# re-runs what changed.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build train test test-student asan bench clean format

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
	rm -rf $(BUILD) build-asan build-student
