# The two commands a user needs: `make demo` and `make test`. Both install the Debian
# packages first (scripts/install-deps.sh is quiet when everything is there).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo bench clean format

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 1500

demo: build
	@scripts/demo.sh $(BUILD_DIR)

# Tune and time every zoo model against each single backend and ONNX Runtime; see
# bench/run.sh for the knobs (BENCH_MODELS, BENCH_BUDGET, ...). Results: bench/results/.
bench: build
	BUILD_DIR=$(BUILD_DIR) bench/run.sh

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
