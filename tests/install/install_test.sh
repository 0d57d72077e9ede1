#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR PYTHON CXX CMAKE python|no-python
# Installs BUILD_DIR into a temporary prefix and uses only that prefix afterwards: the CLI,
# examples/embed through find_package(collage) and through pkg-config, and the Python
# module. Each step must run with no help from the build tree (RPATHs, package files).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
PYTHON=$3
CXX=$4
CMAKE=$5
WITH_PYTHON=$6

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
step() { echo "== $*"; }
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

step "cmake --install $BUILD --prefix $P"
"$CMAKE" --install "$BUILD" --prefix "$P" >"$TMP/install.log"
for f in bin/collage lib/libcollage_core.so include/collage/session.h include/collage/tune.h \
  lib/cmake/collage/collageConfig.cmake lib/cmake/collage/collageConfigVersion.cmake \
  lib/cmake/collage/collageTargets.cmake lib/pkgconfig/collage.pc; do
  [ -e "$P/$f" ] || fail "$f not installed"
done
if [ -e "$BUILD/src/libcollage_torch.so" ] && [ ! -e "$P/lib/libcollage_torch.so" ]; then
  fail "libcollage_torch.so is built but not installed beside libcollage_core.so"
fi
PYDIR=
if [ "$WITH_PYTHON" = python ]; then
  PYDIR=$(ls -d "$P"/lib/python3*/dist-packages)
  [ -e "$PYDIR/collage/__init__.py" ] || fail "the Python package is not installed"
fi

step "installed binaries: relative RUNPATHs only"
for f in "$P/bin/collage" "$P/lib/libcollage_core.so" ${PYDIR:+"$PYDIR"/collage/_collage*.so}; do
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  case "$runpath" in
    *"$BUILD"*) fail "$f still has the build tree in its RUNPATH: $runpath" ;;
  esac
  [ "$f" = "$P/lib/libcollage_core.so" ] || case "$runpath" in
    '$ORIGIN'*) ;;
    *) fail "$f has RUNPATH '$runpath', expected \$ORIGIN-relative" ;;
  esac
done
# The build tree out of reach: anything still pointing into it would now fail.
export LD_LIBRARY_PATH=

step "installed CLI"
"$P/bin/collage" --version | tee "$TMP/version.txt"
grep -q "^collage [0-9]" "$TMP/version.txt" || fail "collage --version"
ldd "$P/bin/collage" | grep libcollage_core | grep -q "$P/" || fail "the CLI does not load the installed libcollage_core.so"
"$P/bin/collage" zoo resnet-tiny -o "$TMP/model.onnx"
if [ -e "$P/lib/libcollage_torch.so" ]; then
  step "torch plugin found beside the installed core"
  "$P/bin/collage" run "$TMP/model.onnx" --backend torch --profile --json >"$TMP/torch.json"
  # Steps on torch: its kernels (in libcollage_torch.so) were found and compiled.
  grep -q '"backend": "torch"' "$TMP/torch.json" || {
    cat "$TMP/torch.json"
    fail "collage run --backend torch from the prefix ran no torch step"
  }
fi

step "examples/embed through find_package(collage)"
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
"$CMAKE" -S "$SRC/examples/embed" -B "$TMP/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CXX" "${LAUNCHER[@]}" -DCMAKE_PREFIX_PATH="$P" >"$TMP/embed-configure.log"
"$CMAKE" --build "$TMP/embed" >"$TMP/embed-build.log" || {
  cat "$TMP/embed-build.log"
  fail "building examples/embed"
}
"$TMP/embed/collage_embed" "$TMP/model.onnx" --budget 1 --backends onednn,xnnpack \
  --cost-db "$TMP/costs.db" --plan-out "$TMP/plan.json" | tee "$TMP/embed.txt"
grep -q "^plan: " "$TMP/embed.txt" || fail "collage_embed printed no plan"
# Its outputs: the installed CLI running the plan it wrote on the same (seed 1) inputs.
want=$(sed -n 's/^output 0: .* sum=\(.*\)$/\1/p' "$TMP/embed.txt")
"$P/bin/collage" run "$TMP/model.onnx" --plan "$TMP/plan.json" >"$TMP/cli-run.txt"
grep -q "checksum sum=$want " "$TMP/cli-run.txt" || {
  cat "$TMP/cli-run.txt"
  fail "collage_embed's output sum $want differs from the CLI's"
}

step "examples/embed through pkg-config"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
flags=$(pkg-config --cflags --libs collage)
libdir=$(pkg-config --variable=libdir collage)
[ "$(cd "$libdir" && pwd)" = "$(cd "$P/lib" && pwd)" ] || fail "pkg-config libdir $libdir"
CC_LAUNCH=()
command -v ccache >/dev/null && CC_LAUNCH=(ccache)
# shellcheck disable=SC2086
"${CC_LAUNCH[@]}" "$CXX" -std=c++20 -O1 "$SRC/examples/embed/main.cc" $flags \
  -Wl,-rpath,"$libdir" -o "$TMP/embed_pc"
"$TMP/embed_pc" "$TMP/model.onnx" --budget 0 --backends onednn --cost-db "$TMP/costs.db" \
  >"$TMP/embed_pc.txt"
grep -q "^output 0: float32 \[1,10\]" "$TMP/embed_pc.txt" || fail "the pkg-config build"

if [ -z "$PYDIR" ]; then
  echo "install test passed (no Python module in this build)"
  exit 0
fi
step "installed Python module"
cd "$TMP"
PYTHONPATH=$PYDIR "$PYTHON" - "$P" "$TMP/model.onnx" "$TMP/plan.json" <<'PY'
import os, sys
import numpy as np
import collage

prefix, model, plan = sys.argv[1:]
here = os.path.realpath(collage.__file__)
assert here.startswith(os.path.realpath(prefix)), here
# The measure worker is the installed CLI, and the core library the installed one.
assert os.path.realpath(collage._paths.CLI) == os.path.realpath(f"{prefix}/bin/collage")
maps = open("/proc/self/maps").read()
core = {line.split()[-1] for line in maps.splitlines() if "libcollage_core" in line}
assert core and all(os.path.realpath(c).startswith(os.path.realpath(prefix)) for c in core), core
sess = collage.InferenceSession(model, plan=plan)
x = np.zeros(sess.get_inputs()[0].shape, np.float32)
(y,) = sess.run(None, {sess.get_inputs()[0].name: x})
assert y.shape == (1, 10) and np.isfinite(y).all()
print("python from the prefix:", here)
PY
echo "install test passed"
