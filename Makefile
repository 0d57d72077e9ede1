# The two commands a user needs: `make demo` and `make test`. Both install the Debian
# packages first (scripts/install-deps.sh is quiet when everything is there).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo bench clean format fuzz check-all

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Tests run kernels in the environment the CLI sets (src/cli/library_env.cc), unless the
# caller set it: idle OpenMP and OpenBLAS workers spin briefly (with the libraries' defaults
# two multi-threaded tests side by side, -j 2 on 2 cores, spin on each other's cores: two
# conformance runs at once 42 s with the defaults, 25 s bounded), and malloc's mapped blocks
# get huge pages.
test: build
	cd $(BUILD_DIR) && if [ -z "$${OMP_WAIT_POLICY}$${GOMP_SPINCOUNT}" ]; then \
	  export GOMP_SPINCOUNT=10000; fi && \
	  OPENBLAS_THREAD_TIMEOUT=$${OPENBLAS_THREAD_TIMEOUT:-15} \
	  GLIBC_TUNABLES=$${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1} \
	  ctest --output-on-failure -j $(JOBS) --timeout 1500

# The same tests built with AddressSanitizer + UndefinedBehaviorSanitizer, in their own
# folder; scripts/test-asan.sh sets the sanitizer options and fails on any report.
ASAN_BUILD_DIR ?= build-asan
.PHONY: test-asan

$(ASAN_BUILD_DIR)/build.ninja:
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCOLLAGE_SANITIZE=ON $(CMAKE_FLAGS)

test-asan: deps $(ASAN_BUILD_DIR)/build.ninja
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	BUILD_DIR=$(ASAN_BUILD_DIR) JOBS=$(JOBS) scripts/test-asan.sh

demo: build
	@scripts/demo.sh $(BUILD_DIR)

# Tune and time every zoo model against each single backend and ONNX Runtime; see
# bench/run.sh for the knobs (BENCH_MODELS, BENCH_BUDGET, ...). Results: bench/results/.
bench: build
	BUILD_DIR=$(BUILD_DIR) bench/run.sh

# libFuzzer over the model loader and the plan checks (fuzz/README.md): a clang build in
# FUZZ_BUILD_DIR, seeds from fuzz/make_corpus.sh, FUZZ_SECONDS split 2:1 between the model
# and plan targets. Crash inputs land in $(FUZZ_BUILD_DIR)/artifacts/.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_FLAGS ?= -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
	-artifact_prefix=$(FUZZ_BUILD_DIR)/artifacts/

fuzz: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCOLLAGE_FUZZ=ON
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS)
	fuzz/make_corpus.sh $(FUZZ_BUILD_DIR) $(BUILD_DIR)/collage
	mkdir -p $(FUZZ_BUILD_DIR)/artifacts
	$(FUZZ_BUILD_DIR)/model_loader_fuzzer $(FUZZ_FLAGS) \
	  -max_total_time=$$(( $(FUZZ_SECONDS) * 2 / 3 )) $(FUZZ_BUILD_DIR)/corpus/model_loader
	$(FUZZ_BUILD_DIR)/plan_fuzzer $(FUZZ_FLAGS) \
	  -max_total_time=$$(( $(FUZZ_SECONDS) / 3 )) $(FUZZ_BUILD_DIR)/corpus/plan

# Everything: the tests, then a short fuzz run (too long for `make test` in CI).
check-all: test
	$(MAKE) fuzz FUZZ_SECONDS=60

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
