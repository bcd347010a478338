#!/bin/sh
# The planner's measured-profile predictions against measurements (issue 19, item 6): the
# profile `spillway-cli plan` calibrates on first use (a prefill timed per ubatch up to ~2K
# tokens deep, decode steps near depth 0 and there; cached per model, machine and backend), then
# for each size N the predicted prefill of an N-token prompt and decode speed at depth N against
# `spillway-cli bench -p N -d N` (prefill of N tokens; decode at depth N), with the difference
# in percent (prediction / measurement - 1). RESULTS.md has the figures.
#
#   tests/bench/planner_bench.sh BUILD_DIR
#
# Builds nothing: BUILD_DIR must hold app/spillway-cli and tests/spillway-testmodel. Run from the
# repository root. The model is the benchmark model (tests/bench/make_bench_models.sh) written
# with context 32768 (BUILD_DIR/bench-models/llama-250m-q4_k_m-ctx32k.gguf, as kv_bench.sh
# writes it; the trained 4096 is too short for 16K). Environment: THREADS (2), SIZES
# ("4096 16384"), REPS (1), N_GEN (16). A fresh data folder each run: the calibration is part of
# what is measured. Output: one line per size on stdout, with date, CPU, ISA and load first.
set -eu

build=${1:?usage: tests/bench/planner_bench.sh BUILD_DIR}
threads=${THREADS:-2}
sizes=${SIZES-"4096 16384"}
reps=${REPS:-1}
n_gen=${N_GEN:-16}
cli=$build/app/spillway-cli
tool=$build/tests/spillway-testmodel
for f in "$cli" "$tool"; do
  [ -x "$f" ] || { echo "error: $f not found (build spillway-cli and spillway-testmodel)" >&2; exit 1; }
done
models=$build/bench-models
model=$models/llama-250m-q4_k_m-ctx32k.gguf
if [ ! -f "$model" ]; then
  mkdir -p "$models"
  "$tool" -o "$model" --mix q4_k_m --arch llama --n-embd 1024 --n-layer 16 --n-head 16 \
    --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 32768 --seed 1
fi
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M') UTC; cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); nproc $(nproc); threads $threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
# Exit 3: the plan says "does not fit"; its predictions are still there.
"$cli" plan -m "$model" -c 4096 -t "$threads" --json --data-dir "$data" >"$data/plan.json" ||
  [ $? -eq 3 ]
t1=$(date +%s.%N)
python3 - "$data/plan.json" "$t0" "$t1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
p = j["profile"]
print(f"profile: {j['predicted_prefill_basis']}; {p['calibration_depth']} tokens deep; plan with "
      f"calibration {float(sys.argv[3]) - float(sys.argv[2]):.1f} s")
PY
for n in $sizes; do
  "$cli" bench -m "$model" -p "$n" -n "$n_gen" -d "$n" -r "$reps" -t "$threads" --json \
    >"$data/bench-$n.json"
  python3 - "$data/plan.json" "$data/bench-$n.json" "$n" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["profile"]
b = json.load(open(sys.argv[2]))
n = int(sys.argv[3])
a, bd = p["prefill_s_per_token"]["a"], p["prefill_s_per_token"]["b_per_depth"]
da, dd = p["decode_s_per_token"]["a"], p["decode_s_per_token"]["b_per_depth"]
pred_pp = a * n + bd * n * (n - 1) / 2
meas_pp = n / b["pp_tokens_per_s"]
pred_tg = 1 / (da + dd * n)
meas_tg = b["tg_tokens_per_s"]
print(f"N={n} ({b['simd']}, {b['backend']}): prefill predicted {pred_pp:.1f} s, measured "
      f"{meas_pp:.1f} s ({100 * (pred_pp / meas_pp - 1):+.0f}%); decode at depth {n} predicted "
      f"{pred_tg:.2f} t/s, measured {meas_tg:.2f} t/s ({100 * (pred_tg / meas_tg - 1):+.0f}%)")
PY
done
