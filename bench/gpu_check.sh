#!/usr/bin/env bash
# The GPU checks in one command, for a lent GPU machine (one call of the device tool: its
# start costs minutes, so everything goes in one run). From the repository root there, with
# the bundle of bench/gpu_bundle.sh (BUNDLE_TESTDATA=1) carried in build-gpu/:
#
#   bash bench/gpu_check.sh      # logs and results under $OUT (else /tmp/out)
#
# 1. `collage backends`: cudnn, cublas, cuda-gen, cuda-graph available?
# 2. the GPU unit tests (FILTER: a gtest filter);
# 3. the conformance suite on each GPU backend (BACKENDS), writing its passing list
#    (conf.tgz: <backend>.txt for tests/conformance/passing/, the log, the JSON report);
# 4. `collage tune` (budget BUDGET, default 40 s) and `run --verify` of the zoo models in TUNE
#    (default "bert-tiny resnet50"; TUNE=none skips it).
# CUDA's libraries come from the machine: /usr/local/cuda or its PyTorch's nvidia-* wheels
# (cuDNN is only there on the machines lent so far).
# First run (NVIDIA H200, 2026-11-26): every step passed in 127 s; docs/DESIGN.md, "GPU backends".
set -u
O=${OUT:-/tmp/out}
mkdir -p "$O" /tmp/w
exec > >(tee "$O/main.log") 2>&1
T0=$(date +%s)
el() { echo "[+$(($(date +%s) - T0))s] $*"; }
el start
nvidia-smi -L
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(ls -d "$NV"/*/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null |
  tr '\n' ':')
mkdir -p /tmp/c && tar -xJf build-gpu/collage-gpu.tar.xz -C /tmp/c
export LD_LIBRARY_PATH=/tmp/c/lib:$LIBS${LD_LIBRARY_PATH:-}
export COLLAGE_CACHE_DIR=/tmp/w/cache
C=/tmp/c/bin
ldd $C/collage /tmp/c/lib/libcollage_core.so | grep -E "not found|cud|nvrtc|cublas" | sort -u
$C/collage backends 2>&1 | grep -E "^(cudnn|cublas|cuda-gen|cuda-graph) "
el unit
timeout 200 $C/collage_unit_tests \
  --gtest_filter="${FILTER:-Device*:CudaGen*:Cudnn*:Cublas*:CudaGraph*}" >"$O/unit.log" 2>&1
echo "unit rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |OK \]" "$O/unit.log" | tail -60
mkdir -p /tmp/w/conf
for b in ${BACKENDS:-cudnn cublas cuda-gen cuda-graph}; do
  el "conformance $b"
  timeout "${CONF_T:-75}" $C/collage_conformance --data-root /tmp/c/data \
    --suite node,pytorch-converted,pytorch-operator,simple --backend "$b" --no-isolate -v \
    --write-passing "/tmp/w/conf/$b.txt" --report "/tmp/w/conf/$b.json" >"/tmp/w/conf/$b.log" 2>&1
  echo "conf $b rc=$?"
  grep "^conformance:" "/tmp/w/conf/$b.log"
done
tar -czf "$O/conf.tgz" -C /tmp/w conf
for m in ${TUNE:-bert-tiny resnet50}; do
  [ "$m" = none ] && break
  el "tune $m"
  $C/collage zoo "$m" -o "/tmp/w/$m.onnx" >/dev/null
  timeout 150 $C/collage tune "/tmp/w/$m.onnx" --budget "${BUDGET:-40}" -o "/tmp/w/$m.plan.json" \
    --cost-db /tmp/w/costs.db >"/tmp/w/tune_$m.log" 2>&1
  echo "tune rc=$?"
  tail -25 "/tmp/w/tune_$m.log"
  timeout 60 $C/collage run "/tmp/w/$m.onnx" --plan "/tmp/w/$m.plan.json" --verify --repeat 20 2>&1 |
    tail -8
  cp "/tmp/w/tune_$m.log" "/tmp/w/$m.plan.json" "$O/" 2>/dev/null
done
el done
