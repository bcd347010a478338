#!/bin/sh
# Decode at context depth D with 75% of the KV on the host tier, its arena in 2 MiB huge pages
# (--huge-pages on) vs 4 KiB pages (--huge-pages off), interleaved so that both run under the
# same load (tests/bench/RESULTS.md, "Host KV arena: huge pages"). Each run is one
# `bench -d D -p 8 -n N --kv-window D/4`: a prefill of D tokens (3/4 of its blocks spill to the
# host tier), then tgN at that depth; the tg tokens/s and the arena's mapped and huge-page-backed
# bytes (/proc/self/smaps AnonHugePages, the JSON's host_mapped_bytes / host_huge_page_bytes)
# are printed per run, and the medians at the end.
#
#   tests/bench/hugepage_abab.sh BENCH MODEL D OUT_DIR [ROUNDS] [N_GEN]
#
# BENCH: spillway-bench (tests/bench, engine only) or "spillway-cli bench". Environment: THREADS
# (2). MODEL is written with spillway-testmodel (TESTMODEL, default BUILD/tests/spillway-testmodel
# beside BENCH's BUILD/tests/bench/) when missing: llama, 2 layers, 4 KV heads of 128, Q8_0,
# context 32768 (4 KiB of f16 KV a token, so 48 MiB on the host tier at D = 16384).
set -eu
bench=${1:?usage: hugepage_abab.sh BENCH MODEL D OUT_DIR [ROUNDS] [N_GEN]}
model=$2
D=$3
out=$4
R=${5:-3}
N=${6:-32}
threads=${THREADS:-2}
testmodel=${TESTMODEL:-$(dirname "$bench")/../spillway-testmodel}
mkdir -p "$out"
if [ ! -f "$model" ]; then
  "$testmodel" -o "$model" --arch llama --type Q8_0 --n-layer 2 --n-embd 512 --n-head 4 \
    --n-head-kv 4 --head-dim 128 --n-ff 1024 --ctx 32768
fi
w=$((D / 4))
echo "date: $(date -u)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)  THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
for r in $(seq 1 "$R"); do
  for hp in on off; do
    j=$out/hp-$D-$hp-$r
    # shellcheck disable=SC2086
    $bench -m "$model" -p 8 -n "$N" -d "$D" -r 1 -t "$threads" --kv-window "$w" \
      --huge-pages "$hp" --json >"$j.json" 2>"$j.err"
    python3 - "$j.json" "$hp" "$r" "$(uptime | sed 's/.*average: //')" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
mib = lambda b: b / 1048576
print(f"round {sys.argv[3]} huge pages {sys.argv[2]:3s} tg {j['tg_tokens_per_s']:.2f} t/s  "
      f"window/host blocks {j['window_blocks']}/{j['host_blocks']}  "
      f"host arena {mib(j['host_mapped_bytes']):.1f} MiB mapped, "
      f"{mib(j['host_huge_page_bytes']):.1f} MiB in huge pages (THP {j['thp_mode']})  "
      f"load {sys.argv[4]}")
PY
  done
done
python3 - "$out" "$D" <<'PY'
import glob, json, statistics, sys
out, D = sys.argv[1], sys.argv[2]
for hp in ("on", "off"):
    t = [json.load(open(f))["tg_tokens_per_s"] for f in sorted(glob.glob(f"{out}/hp-{D}-{hp}-*.json"))]
    print(f"huge pages {hp:3s}: tg median {statistics.median(t):.2f} t/s "
          f"(min {min(t):.2f}, max {max(t):.2f}, {len(t)} runs)")
PY
