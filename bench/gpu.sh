#!/usr/bin/env bash
# collage's GPU benchmark (issue 20): on a machine whose GPU backends are available (`collage
# backends` lists cudnn, cublas, cuda-gen, cuda-graph without "not available"). For each zoo
# model and each precision (fp32: float32 math everywhere; tf32: COLLAGE_CUDA_TF32=1 and
# PyTorch's allow_tf32), tune a plan over every available backend (GPU and CPU), check
# PyTorch's outputs against collage's, then time side by side, in interleaved rounds: the tuned
# plan and every single-backend plan (`collage bench`: each GPU backend alone, its maximal
# regions for cuda-graph), PyTorch eager and torch.compile (default mode) on the same ONNX file
# (bench/peers/torch_run.py). Writes bench/results/gpu/README.md. Builds nothing.
#
# Environment:
#   BENCH_MODELS      zoo models (default: every full-size zoo model)
#   BENCH_PRECISIONS  "fp32 tf32" (default)
#   BENCH_BUDGET      tuning budget per model and precision, seconds (default 120)
#   BENCH_THREADS     CPU thread budget (default: every core)
#   BENCH_ROUNDS      interleaved rounds (default 3); BENCH_REPEAT timed runs per contender per
#                     round (default 10); BENCH_WARMUP untimed runs per round (default 3)
#   BUILD_DIR         where collage is (default build; a bundle from bench/gpu_bundle.sh
#                     unpacks to a directory with the same layout)
#   PYTHON            a python3 with torch (CUDA) and onnx (default: python3 on PATH)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${BUILD_DIR:-build}"
COLLAGE="$ROOT/$BUILD_DIR/collage"
[[ "$BUILD_DIR" = /* ]] && COLLAGE="$BUILD_DIR/collage"
MODELS="${BENCH_MODELS:-resnet50 resnext50 mobilenet-v2 googlenet inception-v3 nasnet-a-mobile bert-base gpt2 vit dcgan resnet3d-50}"
PRECISIONS="${BENCH_PRECISIONS:-fp32 tf32}"
BUDGET="${BENCH_BUDGET:-120}"
THREADS="${BENCH_THREADS:-$(nproc)}"
ROUNDS="${BENCH_ROUNDS:-3}"
REPEAT="${BENCH_REPEAT:-10}"
WARMUP="${BENCH_WARMUP:-3}"
PYTHON="${PYTHON:-python3}"
RESULTS="$ROOT/bench/results/gpu"
WORK="$RESULTS/work.tmp"
COST_DB="$RESULTS/costs.db"
TORCH_RUN="$ROOT/bench/peers/torch_run.py"

say() { printf '[gpu-bench %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'gpu-bench: %s\n' "$*" >&2; exit 1; }

[ -x "$COLLAGE" ] || die "$COLLAGE not found"
for b in cudnn cublas cuda-gen cuda-graph; do
  line="$("$COLLAGE" backends | grep "^$b " || true)"
  [ -n "$line" ] || die "backend $b is not built (configure with the CUDA toolkit and cuDNN)"
  case "$line" in *"not available"*) die "$line" ;; esac
done
"$PYTHON" -c 'import torch, onnx; assert torch.cuda.is_available()' 2>/dev/null ||
  die "$PYTHON lacks torch with CUDA, or onnx"

mkdir -p "$WORK"
gpu="$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))')"
torch_version="$("$PYTHON" -c 'import torch; print(torch.__version__)')"
"$PYTHON" - "$WORK/machine.json" <<EOF
import json, sys
json.dump({"date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "gpu": """$gpu""",
           "torch": "$torch_version", "threads": $THREADS, "budget": $BUDGET,
           "rounds": $ROUNDS, "repeat": $REPEAT, "warmup": $WARMUP,
           "models": "$MODELS".split(), "precisions": "$PRECISIONS".split()},
          open(sys.argv[1], "w"))
EOF

for model in $MODELS; do
  mdir="$WORK/$model"
  mkdir -p "$mdir"
  onnx="$mdir/$model.onnx"
  say "$model: writing the model"
  "$COLLAGE" zoo "$model" -o "$onnx" >"$mdir/zoo.log" 2>&1 || { say "  zoo failed"; continue; }
  for prec in $PRECISIONS; do
    dir="$mdir/$prec"
    mkdir -p "$dir"
    tf32_env=0 tf32_flag=""
    if [ "$prec" = tf32 ]; then tf32_env=1 tf32_flag="--tf32"; fi
    export COLLAGE_CUDA_TF32=$tf32_env
    say "$model/$prec: tuning (budget ${BUDGET}s)"
    if ! "$COLLAGE" tune "$onnx" -o "$dir/plan.json" --cost-db "$COST_DB" --budget "$BUDGET" \
      --threads "$THREADS" >"$dir/tune.log" 2>&1; then
      echo "{\"model\": \"$model\", \"status\": \"tune failed\"}" >"$dir/meta.json"
      say "  tune failed: $(tail -1 "$dir/tune.log")"
      continue
    fi
    say "$model/$prec: checking PyTorch's outputs against collage's"
    check="not checked"
    if "$PYTHON" "$TORCH_RUN" "$onnx" --warmup 0 --repeat 0 $tf32_flag \
      --write-inputs "$dir/inputs" >/dev/null 2>"$dir/torch_check.log" &&
      "$COLLAGE" run "$onnx" --plan "$dir/plan.json" --threads "$THREADS" --inputs "$dir/inputs" \
        --outputs "$dir/collage_outputs" >"$dir/run.log" 2>&1 &&
      "$PYTHON" "$TORCH_RUN" "$onnx" --warmup 0 --repeat 0 $tf32_flag --inputs "$dir/inputs" \
        --compare "$dir/collage_outputs" >"$dir/torch_check.json" 2>>"$dir/torch_check.log"; then
      check="$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["compare"]["status"])' \
        "$dir/torch_check.json")"
    fi
    say "  outputs: $check"
    echo "{\"model\": \"$model\", \"precision\": \"$prec\", \"status\": \"ok\", \"check\": \"$check\"}" \
      >"$dir/meta.json"
    for ((r = 1; r <= ROUNDS; r++)); do
      say "$model/$prec: timing, round $r/$ROUNDS"
      order="collage eager compile"
      ((r % 2 == 0)) && order="compile eager collage"
      for who in $order; do
        case $who in
          collage)
            "$COLLAGE" bench "$onnx" --plan "$dir/plan.json" --threads "$THREADS" \
              --warmup "$WARMUP" --repeat "$REPEAT" --json "$dir/collage_$r.json" \
              >"$dir/bench_$r.log" 2>&1 || say "  collage bench failed: $(tail -1 "$dir/bench_$r.log")" ;;
          eager | compile)
            "$PYTHON" "$TORCH_RUN" "$onnx" --mode "$who" $tf32_flag --warmup "$WARMUP" \
              --repeat "$REPEAT" >"$dir/torch_${who}_$r.json" 2>"$dir/torch_${who}_$r.log" ||
              say "  torch $who failed: $(tail -1 "$dir/torch_${who}_$r.log")" ;;
        esac
      done
    done
  done
done
unset COLLAGE_CUDA_TF32

say "writing bench/results/gpu/README.md"
"$PYTHON" bench/report.py gpu-summarize "$WORK" --out-dir "$RESULTS"
