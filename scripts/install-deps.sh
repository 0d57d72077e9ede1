#!/usr/bin/env bash
# Installs every Debian package collage needs to build, test and benchmark.
# Idempotent: quiet when everything is present; uses sudo when not root.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang-format
  # model format
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  # well-kept helper libraries
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # backends
  # Debian builds oneDNN with its OpenCL GPU runtime, so dnnl-config.cmake needs the OpenCL
  # headers and library; libdnnl-dev only *recommends* them (we install no recommends).
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libopenblas-dev libopenblas0-pthread libxnnpack-dev libpthreadpool-dev
  libhalide14-0-dev libtorch-dev
  # LLVM's OpenMP runtime, which the CLI preloads in place of libgomp (src/cli/library_env.cc:
  # a parallel region forks and joins in half the time)
  libomp5-14
  # HalideConfig.cmake asks for its PNG and JPEG components by default and sets Halide_FOUND
  # to FALSE without their dev files (we install no recommends): the halide backend was
  # silently skipped on a fresh machine (scripts/check-fresh-machine.sh, 2026-12-05)
  libpng-dev libjpeg-dev
  # names the halide backend's cached kernel files (XXH3-128 of the pipeline description)
  libxxhash-dev
  # the libxsmm backend: JIT small GEMMs / 1x1 convs (static library only; links OpenBLAS)
  libxsmm-dev
  # PyTorch's exporter, used by tests to make real exported models
  python3-torch python3-torchvision python3-onnx python3-numpy
  # the Python module (pybind11 extension for Debian's python3) and its pytest suites
  pybind11-dev python3-dev python3-pytest
  # `collage show --svg`
  graphviz
  # the PostgreSQL cost database (--cost-db postgresql://...): libpq to build it (without it
  # the build skips it), and the server, which its tests and bench/scale_out.py start in a
  # temporary folder (initdb/pg_ctl from /usr/lib/postgresql/*/bin; psql to inspect rows)
  libpq-dev postgresql
  # `make fuzz` (libFuzzer needs clang and its runtime)
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
