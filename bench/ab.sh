#!/usr/bin/env bash
# Two ways of running one model, A and B, timed end to end in alternating processes: per
# round `collage run` of A, then of B (the order swapped every other round), each its own
# process with warm-up runs, as a user runs one model. What to use before keeping a speed-up:
# a kernel or variant that wins when timed alone may not win in the model (docs/DESIGN.md,
# "Transformers (issue 16)": a batched attention variant 0.27 ms faster alone, and 24
# residual copies removed, each moved ViT-B/16 end to end by nothing), and this VM drifts
# 10-20 % within minutes, so only a side-by-side comparison of medians says anything.
#
#   bench/ab.sh MODEL.onnx A B
#     A, B: a plan (PLAN.json), or BINARY:PLAN.json to run that plan with another build of
#     collage (e.g. one built from the commit before a change, in another build folder)
#   BENCH_ROUNDS=N     alternating rounds (default 6)
#   BENCH_REPEAT=N     timed runs per process (default 15; BENCH_WARMUP untimed, default 3)
#   BENCH_THREADS=N    collage --threads (default 2)
#
# Prints each round's medians and, at the end, per side the median of the round medians and
# the fastest sample, and B's median over A's with the median of the per-round ratios. Runs
# with OPENBLAS_CORETYPE unset, as bench/run.sh.
set -euo pipefail
unset OPENBLAS_CORETYPE
BUILD="${BUILD_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build}"
ROUNDS="${BENCH_ROUNDS:-6}"
REPEAT="${BENCH_REPEAT:-15}"
WARMUP="${BENCH_WARMUP:-3}"
THREADS="${BENCH_THREADS:-2}"

usage() {
  sed -n '10,15p' "$0" >&2
  exit 2
}
[ $# -eq 3 ] || usage
model="$1"
[ -f "$model" ] || { echo "ab.sh: no model file '$model'" >&2; exit 2; }

# "BINARY:PLAN" or "PLAN" -> binary and plan, both checked.
split_side() {
  local side="$1" binary plan
  if [[ "$side" == *:* ]]; then
    binary="${side%%:*}"
    plan="${side#*:}"
  else
    binary="$BUILD/collage"
    plan="$side"
  fi
  [ -x "$binary" ] || { echo "ab.sh: '$binary' is not an executable collage" >&2; exit 2; }
  [ -f "$plan" ] || { echo "ab.sh: no plan file '$plan'" >&2; exit 2; }
  printf '%s\n%s\n' "$binary" "$plan"
}
mapfile -t side_a < <(split_side "$2")
mapfile -t side_b < <(split_side "$3")
[ ${#side_a[@]} -eq 2 ] && [ ${#side_b[@]} -eq 2 ] || exit 2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One process: its median and fastest sample, "MEDIAN MIN", or a message and exit 1.
time_side() {
  local binary="$1" plan="$2" out="$work/run.json"
  if ! "$binary" run "$model" --plan "$plan" --threads "$THREADS" --repeat "$REPEAT" \
    --warmup "$WARMUP" --json >"$out" 2>"$work/run.log"; then
    echo "ab.sh: collage run failed ($binary, $plan):" >&2
    tail -5 "$work/run.log" >&2
    exit 1
  fi
  python3 -c 'import json, sys
l = json.load(open(sys.argv[1]))["latency_ms"]
print(l["median"], l["min"])' "$out"
}

: >"$work/samples"
declare -A med fastest  # by side, this round's
for ((r = 1; r <= ROUNDS; r++)); do
  order=(a b)
  ((r % 2 == 0)) && order=(b a)
  for s in "${order[@]}"; do
    if [ "$s" = a ]; then side=("${side_a[@]}"); else side=("${side_b[@]}"); fi
    read -r "med[$s]" "fastest[$s]" < <(time_side "${side[@]}")
  done
  printf 'round %d: A %.3f ms  B %.3f ms\n' "$r" "${med[a]}" "${med[b]}"
  echo "${med[a]} ${fastest[a]} ${med[b]} ${fastest[b]}" >>"$work/samples"
done

# Medians by the project's one rule (bench/report.py's: the upper middle sample, as `collage
# bench` and runtime/interleaved_timing.h take them).
python3 - "$work/samples" "$(dirname "$0")" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
from report import median
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
a = [r[0] for r in rows]; b = [r[2] for r in rows]
ratios = [y / x for x, y in zip(a, b)]
print(f"A: median {median(a):.3f} ms, fastest {min(r[1] for r in rows):.3f}")
print(f"B: median {median(b):.3f} ms, fastest {min(r[3] for r in rows):.3f}")
print(f"B / A: {median(b) / median(a):.3f} (medians), {median(ratios):.3f} (median of the "
      f"rounds' ratios; B faster in {sum(1 for q in ratios if q < 1)} of {len(ratios)} rounds)")
EOF
