#!/usr/bin/env bash
# The PyTorch peer of the GPU benchmark (bench/peers/torch_run.py, an interpreter of the ONNX
# file's nodes with PyTorch ops) must compute what collage's reference backend computes, or
# its timings compare different work: on a zoo model, on the same random inputs, on the CPU.
#   torch_peer_check.sh COLLAGE PYTHON WORK_DIR MODEL
set -euo pipefail
collage=$1 python=$2 work=$3 model=$4
peer="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bench/peers/torch_run.py"
dir="$work/$model"
rm -rf "$dir" && mkdir -p "$dir"
"$collage" zoo "$model" -o "$dir/model.onnx" >/dev/null
"$python" "$peer" "$dir/model.onnx" --device cpu --warmup 0 --repeat 0 --write-inputs "$dir/inputs" >/dev/null
"$collage" run "$dir/model.onnx" --backend reference --inputs "$dir/inputs" \
  --outputs "$dir/reference_outputs" >/dev/null
"$python" "$peer" "$dir/model.onnx" --device cpu --warmup 0 --repeat 0 --inputs "$dir/inputs" \
  --compare "$dir/reference_outputs" >"$dir/compare.json"
cat "$dir/compare.json"
"$python" -c 'import json, sys; c = json.load(open(sys.argv[1]))["compare"]; sys.exit(c["status"] != "ok")' \
  "$dir/compare.json"
