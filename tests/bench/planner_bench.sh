#!/bin/sh
# The planner's measured-profile predictions against measurements (issue 19, item 6): for each
# size N, `spillway-cli plan -c N` in a fresh data folder (so it calibrates: the calibration is
# part of what is measured) predicts the prefill of N tokens and the decode speed at depth N;
# `spillway-cli bench -p N -d N` measures them; the difference is prediction / measurement - 1.
# Given a second build (the old binary, e.g. main's), each size runs old and new back to back
# (calibration, then measurement, each), the order alternating between sizes, so both see the
# same minutes of a shared machine. RESULTS.md has the figures.
#
#   tests/bench/planner_bench.sh BUILD_DIR [OLD_BUILD_DIR]
#
# Builds nothing: BUILD_DIR must hold app/spillway-cli and tests/spillway-testmodel
# (OLD_BUILD_DIR app/spillway-cli). Run from the repository root. The model is the benchmark
# model (tests/bench/make_bench_models.sh) written with context 32768
# (BUILD_DIR/bench-models/llama-250m-q4_k_m-ctx32k.gguf, as kv_bench.sh writes it; the trained
# 4096 is too short for 16K). Environment: THREADS (2), SIZES ("4096 16384"), REPS (1), N_GEN
# (64: a 16-token decode carries a block spill's and the first step's costs in 16). Output on
# stdout: a line with date, CPU, ISA flags and load, a line per calibration as it ends, then a
# Markdown table, one row per size and binary (the load average at its start and end last).
set -eu

build=${1:?usage: tests/bench/planner_bench.sh BUILD_DIR [OLD_BUILD_DIR]}
old=${2:-}
threads=${THREADS:-2}
sizes=${SIZES-"4096 16384"}
reps=${REPS:-1}
n_gen=${N_GEN:-64}
tool=$build/tests/spillway-testmodel
for f in "$build/app/spillway-cli" "$tool" ${old:+"$old/app/spillway-cli"}; do
  [ -x "$f" ] || { echo "error: $f not found (build spillway-cli and spillway-testmodel)" >&2; exit 1; }
done
models=$build/bench-models
model=$models/llama-250m-q4_k_m-ctx32k.gguf
if [ ! -f "$model" ]; then
  mkdir -p "$models"
  "$tool" -o "$model" --mix q4_k_m --arch llama --n-embd 1024 --n-layer 16 --n-head 16 \
    --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 32768 --seed 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

load() { cut -d' ' -f1 /proc/loadavg; }
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16)$' | tr '\n' ' ')
echo "date: $(date -u '+%Y-%m-%d %H:%M') UTC; cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); nproc $(nproc); flags: ${flags% }; threads $threads; load $(cut -d' ' -f1-3 /proc/loadavg)"

# One size on one binary: calibrate in a fresh folder, predict, measure, print a row.
run_one() { # NAME CLI N
  name=$1 cli=$2 n=$3
  data=$work/$name-$n
  mkdir -p "$data"
  l0=$(load)
  t0=$(date +%s.%N)
  # Exit 3: the plan says "does not fit"; its predictions are still there.
  "$cli" plan -m "$model" -c "$n" -t "$threads" --json --data-dir "$data" >"$data/plan.json" \
    2>"$data/plan.err" || [ $? -eq 3 ]
  t1=$(date +%s.%N)
  "$cli" bench -m "$model" -p "$n" -n "$n_gen" -d "$n" -r "$reps" -t "$threads" --json \
    >"$data/bench.json" 2>"$data/bench.err"
  l1=$(load)
  python3 - "$data/plan.json" "$data/bench.json" "$n" "$name" "$t0" "$t1" "$l0" "$l1" "$work/rows" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
n, name = int(sys.argv[3]), sys.argv[4]
prof = j.get("profile") or {}
cal = prof.get("calibration_s")
print(f"calibration ({name}, N={n}): {j['predicted_prefill_basis']}; "
      f"{prof.get('calibration_depth')} tokens deep; "
      + (f"{cal:.1f} s; " if cal is not None else "")
      + f"plan with calibration {float(sys.argv[6]) - float(sys.argv[5]):.1f} s", flush=True)
pred_pp = j["predicted_prefill_s"]
meas_pp = n / b["pp_tokens_per_s"]
pred_tg = j["predicted_decode_tokens_per_s"]
meas_tg = b["tg_tokens_per_s"]
with open(sys.argv[9], "a") as rows:
    print(f"| {n:,} | {name} ({b['simd']}) | {pred_pp:.1f} s | {meas_pp:.1f} s | "
          f"{100 * (pred_pp / meas_pp - 1):+.0f}% | {pred_tg:.1f} t/s | {meas_tg:.1f} t/s | "
          f"{100 * (pred_tg / meas_tg - 1):+.0f}% | {sys.argv[7]} / {sys.argv[8]} |", file=rows)
PY
}

i=0
for n in $sizes; do
  if [ -z "$old" ]; then
    run_one new "$build/app/spillway-cli" "$n"
  elif [ $((i % 2)) -eq 0 ]; then
    run_one old "$old/app/spillway-cli" "$n"
    run_one new "$build/app/spillway-cli" "$n"
  else
    run_one new "$build/app/spillway-cli" "$n"
    run_one old "$old/app/spillway-cli" "$n"
  fi
  i=$((i + 1))
done
echo
echo "| N | binary | prefill predicted | measured | difference | decode at depth N predicted | measured | difference | load start / end |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$work/rows"
