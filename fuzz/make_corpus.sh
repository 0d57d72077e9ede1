#!/bin/bash
# Seed corpora for the fuzz targets, under the fuzz build dir (never committed):
#   BUILD/corpus/model_loader  ONNX conformance models (libonnx-testdata), the zoo's tiny
#                              models (when a CLI is built), committed regression inputs
#   BUILD/corpus/plan          plans the plan_fuzzer generates for its models, committed
#                              regression inputs
# Usage: fuzz/make_corpus.sh [BUILD_DIR=build-fuzz] [COLLAGE_CLI=build/collage]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-fuzz}
cli=${2:-$root/build/collage}
regressions=$root/tests/robustness/fuzz_regressions
model_dir=$build/corpus/model_loader
plan_dir=$build/corpus/plan
mkdir -p "$model_dir" "$plan_dir"

# Conformance models: named after their test so a finding says where it started.
testdata=/usr/share/libonnx-testdata/data
if [ -d "$testdata" ]; then
  find "$testdata" -name model.onnx | while read -r f; do
    rel=${f#"$testdata"/}
    cp "$f" "$model_dir/$(dirname "$rel" | tr / _)"
  done
else
  echo "make_corpus: $testdata missing (apt-get install libonnx-testdata): no conformance seeds" >&2
fi

# The tiny zoo models come from the full build's CLI (the fuzz build has none). The larger
# tiny ones are left out: a 500 KB input slows every mutation of it.
if [ -x "$cli" ]; then
  for m in dcgan-tiny resnet3d-tiny nasnet-tiny mobilenet-tiny; do
    "$cli" zoo "$m" -o "$model_dir/zoo-$m.onnx" >/dev/null
  done
else
  echo "make_corpus: no CLI at $cli: no zoo seeds" >&2
fi

for f in "$regressions"/model-*; do [ -e "$f" ] && cp "$f" "$model_dir/"; done
for f in "$regressions"/plan-*; do [ -e "$f" ] && cp "$f" "$plan_dir/"; done
COLLAGE_FUZZ_WRITE_SEEDS=$plan_dir "$build/plan_fuzzer"

echo "corpus: $(ls "$model_dir" | wc -l) model seeds in $model_dir," \
  "$(ls "$plan_dir" | wc -l) plan seeds in $plan_dir"
