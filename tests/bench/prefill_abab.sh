#!/bin/sh
# Prefill at long context, two builds interleaved run by run (tests/bench/RESULTS.md, "Query-tiled
# prefill attention"): for each N in SIZES and each round, OLD then NEW run
#   spillway-bench -m MODEL -p N -n 16 -r 1 -t THREADS --json
# and one line per run gives pp t/s, attention's share of the prefill thread-seconds, attention's
# own GFLOP/s (new builds only), the FP32 probe read right after it, peak RSS and the load.
#
#   tests/bench/prefill_abab.sh OLD_BENCH NEW_BENCH MODEL "4096 16384" [ROUNDS]
#
# The model needs a context of at least the largest N (the benchmark shape with --ctx 32768:
# spillway-testmodel --type Q8_0 --arch llama --n-embd 1024 --n-layer 16 --n-head 16
# --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 32768 --seed 1). Environment: THREADS (2).
set -eu
old=${1:?usage: prefill_abab.sh OLD_BENCH NEW_BENCH MODEL SIZES [ROUNDS]}
new=${2:?}
model=${3:?}
sizes=${4:?}
rounds=${5:-1}
threads=${THREADS:-2}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, -t $threads"
echo "# N round build pp_t/s attn_share attn_GFLOP/s fp32_probe_GFLOP/s peak_RSS_MiB load1"
for n in $sizes; do
  for r in $(seq 1 "$rounds"); do
    for b in old new; do
      eval bin=\$$b
      "$bin" -m "$model" -p "$n" -n 16 -r 1 -t "$threads" --json 2>/dev/null |
        python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sys.argv[1], sys.argv[2], sys.argv[3], "%.1f" % j["pp_tokens_per_s"],
      "%.3f" % j["pp_attention_share"], "%.1f" % j.get("pp_attention_gflops_per_s", 0.0),
      "%.1f" % j["peak_gflops_per_s"], "%.0f" % (j["peak_rss_bytes"] / 1048576.0),
      open("/proc/loadavg").read().split()[0])' "$n" "$r" "$b"
    done
  done
done
