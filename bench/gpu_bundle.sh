#!/usr/bin/env bash
# Packs collage for a lent GPU machine (issue 20): such a machine has the CUDA toolkit, cuDNN
# and PyTorch, but none of Debian's libraries, and takes at most 64 MiB of carried files. So:
# a GPU-focused build (no halide: LLVM alone is 100 MB; no torch; no -march=native, the
# machine's CPU is another one) in build-gpu/, then bin/ (collage, the unit tests, the
# conformance runner) and lib/ (libcollage_core.so and every library it needs that is not
# glibc's or CUDA's, found with ldd) in one xz tarball.
#
#   bench/gpu_bundle.sh            -> build-gpu/collage-gpu.tar.xz
#   BUNDLE_TESTDATA=1 bench/gpu_bundle.sh   also packs the ONNX conformance data (data/)
#
# On the GPU machine, from the repository root:
#   mkdir -p /tmp/c && tar -xJf build-gpu/collage-gpu.tar.xz -C /tmp/c
#   export LD_LIBRARY_PATH=/tmp/c/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
#   # (cuDNN may be in the machine's PyTorch wheels only: add each
#   #  $(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')/*/lib as well)
#   /tmp/c/bin/collage backends                      # cudnn, cublas, cuda-gen, cuda-graph available?
#   /tmp/c/bin/collage_unit_tests --gtest_filter='Device*:CudaGen*:Cudnn*:Cublas*:CudaGraph*'
#   /tmp/c/bin/collage_conformance --data-root /tmp/c/data --suite node,simple --backend cudnn \
#       --no-isolate   # (with BUNDLE_TESTDATA=1)
#   BUILD_DIR=/tmp/c/bin bench/gpu.sh               # the benchmark (bench/gpu.sh)
# bench/gpu_check.sh does all of this (and the conformance runs) in one command.
# glibc is the machine's: the bundle needs one at least as new as the build machine's (2.36 on
# Debian 12).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${BUNDLE_BUILD_DIR:-build-gpu}"
JOBS="${BUNDLE_JOBS:-2}"

say() { printf '[gpu-bundle] %s\n' "$*"; }

CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-$(command -v ccache || true)} \
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLAGE_WITH_CUDA=ON \
  -DCOLLAGE_WITH_TORCH=OFF -DCOLLAGE_SKIP_BACKENDS=halide -DCOLLAGE_NATIVE=OFF >/dev/null
say "building collage, collage_unit_tests, collage_conformance in $BUILD"
cmake --build "$BUILD" -j"$JOBS" --target collage collage_unit_tests collage_conformance

stage="$BUILD/bundle"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$BUILD/collage" "$BUILD/collage_conformance" "$BUILD/tests/collage_unit_tests" "$stage/bin/"
cp "$BUILD/src/libcollage_core.so" "$stage/lib/"
# Every library the binaries load that the GPU machine lacks: all but glibc's and CUDA's.
ldd "$stage"/bin/* "$stage/lib/libcollage_core.so" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  grep -Ev '/lib(cudart|cudnn[a-z_]*|nvrtc[a-z.-]*|cublas[A-Za-z]*|cuda)\.so' |
  grep -v '/libcollage_core\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
if [ "${BUNDLE_TESTDATA:-0}" = 1 ]; then
  cp -r /usr/share/libonnx-testdata/data "$stage/data"
fi
tar -cJf "$BUILD/collage-gpu.tar.xz" -C "$stage" .
say "$(du -h "$BUILD/collage-gpu.tar.xz" | cut -f1) in $BUILD/collage-gpu.tar.xz ($(ls "$stage/lib" | wc -l) libraries)"
size=$(stat -c %s "$BUILD/collage-gpu.tar.xz")
[ "$size" -lt $((64 * 1024 * 1024)) ] || say "WARNING: over the 64 MiB a device call carries"
