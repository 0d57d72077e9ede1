#!/usr/bin/env bash
# `make demo`: tune a built-in model on this machine, show the placement, run the plan and
# compare it with every single-backend plan.
set -euo pipefail
BUILD=${1:-build}
OUT=$BUILD/demo
MODEL_NAME=${COLLAGE_DEMO_MODEL:-resnet50}
mkdir -p "$OUT"

# OpenBLAS reads OPENBLAS_CORETYPE when it loads. Some machines pin it to an older core
# (Haswell: AVX2) than the CPU has; a user's machine normally doesn't, so neither do we.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "demo: ignoring OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (OpenBLAS picks the kernel for this CPU)"
  unset OPENBLAS_CORETYPE
fi

echo "== the model (built in: build/collage zoo --list shows the others)"
MODEL=$OUT/$MODEL_NAME.onnx
[ -f "$MODEL" ] || "$BUILD/collage" zoo "$MODEL_NAME" -o "$MODEL"
# Outputs go through files, not `| head`: with pipefail a closed pipe (SIGPIPE) would fail the demo.
"$BUILD/collage" info "$MODEL" > "$OUT/info.txt"
grep -v '^  ' "$OUT/info.txt" || true

echo
echo "== backends on this machine"
"$BUILD/collage" backends > "$OUT/backends.txt"
grep -v '^    ' "$OUT/backends.txt" || true

echo
echo "== tuning (costs are cached in $OUT/costs.db: a second 'make demo' is fast)"
"$BUILD/collage" tune "$MODEL" -o "$OUT/$MODEL_NAME.plan.json" --cost-db "$OUT/costs.db" \
  --budget "${COLLAGE_DEMO_BUDGET:-30}"

echo
echo "== the placement"
"$BUILD/collage" show "$MODEL" --plan "$OUT/$MODEL_NAME.plan.json" --dot "$OUT/$MODEL_NAME.dot" \
  > "$OUT/placement.txt"
head -40 "$OUT/placement.txt"
echo "(the whole placement: $OUT/placement.txt; as a graph: $OUT/$MODEL_NAME.dot)"

echo
echo "== running the plan (outputs checked against the reference backend)"
"$BUILD/collage" run "$MODEL" --plan "$OUT/$MODEL_NAME.plan.json" --repeat 10 --verify \
  --outputs "$OUT/${MODEL_NAME}_outputs"
