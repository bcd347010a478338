#!/bin/sh
# Decode at context depth D, all in the window vs 75% of the KV cold (host; host + disk),
# interleaved from one snapshot so that every configuration runs under the same load
# (tests/bench/RESULTS.md, "Tiered KV cache"):
#   1. the prompt (PROMPT_FILE, exactly D tokens) is prefilled once, all in the window, and saved
#      with --save-kv (skipped when the snapshot exists);
#   2. ROUNDS rounds of (a) window, (b) host, (c) host + disk: `generate --load-kv` with that
#      configuration's flags (the restore puts each block in the tier the flags give) and -n 64,
#      decode tokens/s from the last --stats-json line; the 64 tokens are compared at the end.
#
#   tests/bench/kv_abab.sh CLI MODEL D PROMPT_FILE OUT_DIR [ROUNDS]
#
# Environment: THREADS (2), SPILL_DIR (/tmp/spillway-kvbench). kv_bench.sh writes the model
# (BUILD_DIR/bench-models/llama-250m-q4_k_m-ctx32k.gguf) and D-token prompts (OUT/prompt-D.txt).
set -eu
cli=${1:?usage: kv_abab.sh CLI MODEL D PROMPT_FILE OUT_DIR [ROUNDS]}
model=$2
D=$3
prompt=$4
out=$5
R=${6:-3}
threads=${THREADS:-2}
spill=${SPILL_DIR:-/tmp/spillway-kvbench}
mkdir -p "$out" "$spill"
snap=$spill/abab-$D.kv
bpt=$("$cli" plan -m "$model" -c 4096 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_bytes_per_token"])')
w=$((D / 4))
cold=$(((D - w) * bpt))
host=$((cold / 2))
disk=$((cold - host + 8 * 256 * bpt))
if [ ! -f "$snap" ]; then
  t0=$(date +%s)
  "$cli" generate -m "$model" -f "$prompt" -n 1 --temp 0 -t "$threads" --kv-window $((D + 64)) \
    --save-kv "$snap" --json >/dev/null 2>"$out/save.err"
  echo "prefill + save of $D tokens: $(($(date +%s) - t0)) s"
fi
for r in $(seq 1 "$R"); do
  for cfg in window host hostdisk; do
    case $cfg in
      window) flags="--kv-window $((D + 64))" ;;
      host) flags="--kv-window $w" ;;
      hostdisk) flags="--kv-window $w --host-budget $host --disk-budget $disk --spill-dir $spill" ;;
    esac
    j=$out/abab-$D-$cfg-$r
    # shellcheck disable=SC2086
    "$cli" generate -m "$model" -f "$prompt" -n 64 --temp 0 -t "$threads" $flags --load-kv "$snap" \
      --stats-json "$j.jsonl" --json >"$j.json" 2>"$j.err"
    python3 - "$j.jsonl" "$cfg" "$r" "$(uptime | sed 's/.*average: //')" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
print(f"round {sys.argv[3]} {sys.argv[2]:9s} decode {last['decode_tokens_per_s']:.2f} t/s  "
      f"window/host/disk blocks {last['window_blocks']}/{last['host_blocks']}/{last['disk_blocks']}  "
      f"prefill_computed {last['prefill_tokens_computed']}  load {sys.argv[4]}")
PY
  done
done
python3 - "$out" "$D" <<'PY'
import glob, json, sys
runs = {f: json.load(open(f))["generated_tokens"] for f in sorted(glob.glob(f"{sys.argv[1]}/abab-{sys.argv[2]}-*.json"))}
ref = next(iter(runs.values()))
for f, t in runs.items():
    d = next((i for i in range(len(t)) if t[i] != ref[i]), None)
    print(f"{f.split('/')[-1]}: {'same tokens' if d is None else f'first differs at step {d}'}")
PY
