#!/bin/sh
# Prefill at long context, two builds interleaved run by run (tests/bench/RESULTS.md, "Query-tiled
# prefill attention"): for each N in SIZES and each round, OLD then NEW run
#   spillway-bench -m MODEL -p N -n 16 -r REPS -t THREADS --json
# and one line per run gives pp t/s, attention's share of the prefill thread-seconds, attention's
# own GFLOP/s, the FP32 probe read right after it, all of prefill's GFLOP/s, the int8 probe,
# peak RSS and the load ("-" for fields a build does not write: the build issue 18 was filed
# against writes only t/s and RSS).
#
#   tests/bench/prefill_abab.sh OLD_BENCH NEW_BENCH MODEL "4096 16384" [ROUNDS]
#
# The model needs a context of at least the largest N (the benchmark shape with --ctx 32768:
# spillway-testmodel --type Q8_0 --arch llama --n-embd 1024 --n-layer 16 --n-head 16
# --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 32768 --seed 1). Environment: THREADS (2),
# REPS (1: repeats per run; bench reports their median).
set -eu
old=${1:?usage: prefill_abab.sh OLD_BENCH NEW_BENCH MODEL SIZES [ROUNDS]}
new=${2:?}
model=${3:?}
sizes=${4:?}
rounds=${5:-1}
threads=${THREADS:-2}
reps=${REPS:-1}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, -t $threads"
echo "# N round build pp_t/s attn_share attn_GFLOP/s fp32_probe_GFLOP/s pp_GFLOP/s int8_probe_GOP/s peak_RSS_MiB load1"
for n in $sizes; do
  for r in $(seq 1 "$rounds"); do
    for b in old new; do
      eval bin=\$$b
      "$bin" -m "$model" -p "$n" -n 16 -r "$reps" -t "$threads" --json 2>/dev/null |
        python3 -c '
import json, sys
j = json.load(sys.stdin)
def f(key, fmt, scale=1.0):  # fields an older build does not write: "-"
    return fmt % (j[key] / scale) if key in j else "-"
print(sys.argv[1], sys.argv[2], sys.argv[3], "%.1f" % j["pp_tokens_per_s"],
      f("pp_attention_share", "%.3f"), f("pp_attention_gflops_per_s", "%.1f"),
      f("peak_gflops_per_s", "%.1f"), f("pp_gflops_per_s", "%.1f"),
      f("peak_int8_gops_per_s", "%.0f"), "%.0f" % (j["peak_rss_bytes"] / 1048576.0),
      open("/proc/loadavg").read().split()[0])' "$n" "$r" "$b"
    done
  done
done
