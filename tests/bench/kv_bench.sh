#!/bin/sh
# The tiered KV cache benchmark of issue 6, in one run, back to back (tests/bench/RESULTS.md):
#   1. decode tokens/s (tg at -n 64) at context depths (default 4096 and 8192) with
#      (a) everything in the window (--kv-window >= depth),
#      (b) 75% of the KV cold in host RAM (--kv-window depth/4, no host limit),
#      (c) 75% cold split host + disk (host budget half of the cold bytes, disk the rest),
#   2. snapshot restore (generate --load-kv) vs re-prefill (generate --save-kv) of the same prompt,
#   3. greedy agreement of --attention streaming and topk:8 with exact over 256 steps.
#
#   tests/bench/kv_bench.sh BUILD_DIR [OUT_DIR]
#
# Builds nothing: BUILD_DIR must hold app/spillway-cli and tests/spillway-testmodel. Run from the
# repository root. The benchmark model is BUILD_DIR/bench-models/llama-250m-q4_k_m.gguf
# (tests/bench/make_bench_models.sh writes it when absent); its training context is 4096, too
# short for depth + n_gen, so the script writes the same model with context 32768 beside it
# (llama-250m-q4_k_m-ctx32k.gguf: the same seeded weights, one metadata value differs).
# Environment: THREADS (2), REPS (3; depths up to 4096), REPS_LONG (2; deeper), DEPTHS
# ("4096 8192"), SNAP_DEPTHS ("4096 8192"), SPILL_DIR (/tmp/spillway-kvbench),
# STORIES (/work/shared/models/stories260K.gguf, for the agreement test; its context is 2048),
# AGREE (1; 0 skips the agreement test). Empty DEPTHS or SNAP_DEPTHS skip those parts.
# Output: OUT_DIR (default BUILD_DIR/kv-bench) holds every JSON; the summary goes to stdout.
set -eu

build=${1:?usage: tests/bench/kv_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-$build/kv-bench}
threads=${THREADS:-2}
reps=${REPS:-3}
reps_long=${REPS_LONG:-2}
depths=${DEPTHS-"4096 8192"}
snap_depths=${SNAP_DEPTHS-"4096 8192"}
spill=${SPILL_DIR:-/tmp/spillway-kvbench}
stories=${STORIES:-/work/shared/models/stories260K.gguf}
cli=$build/app/spillway-cli
tool=$build/tests/spillway-testmodel
for f in "$cli" "$tool"; do
  [ -x "$f" ] || { echo "error: $f not found (build spillway-cli and spillway-testmodel)" >&2; exit 1; }
done
mkdir -p "$out" "$spill"

models=$build/bench-models
base=$models/llama-250m-q4_k_m.gguf
model=$models/llama-250m-q4_k_m-ctx32k.gguf
[ -f "$base" ] || tests/bench/make_bench_models.sh "$models" "$tool"
if [ ! -f "$model" ]; then
  "$tool" -o "$model" --mix q4_k_m --arch llama --n-embd 1024 --n-layer 16 --n-head 16 \
    --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 32768 --seed 1
fi

now() { date +%s.%N; }
log() { echo "$*" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"
log "start: $(date -u)  uptime: $(uptime)"
log "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)  nproc: $(nproc)"

# KV bytes per token and block of the model (f16 K and V), from the planner.
bpt=$("$cli" plan -m "$model" -c 4096 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_bytes_per_token"])')
log "kv_bytes_per_token: $bpt"

# ---- 1. decode at depth ----------------------------------------------------------------------
n_gen=64
field() {  # field FILE KEY...: the keys' values in the bench JSON
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(" ".join(str(j[k]) for k in sys.argv[2:]))' "$@"
}
log ""
log "depth config tg_median tg_min tg_max window_blocks host_blocks disk_blocks kv_window host_budget disk_budget"
for d in $depths; do
  r=$reps
  [ "$d" -gt 4096 ] && r=$reps_long
  w=$((d / 4))
  cold=$(((d - w) * bpt))  # bytes out of the window at depth d (before sinks round up)
  host=$((cold / 2))
  disk=$((cold - host + 8 * 256 * bpt))  # the rest, plus margin for the generated tokens
  for cfg in window host hostdisk; do
    case $cfg in
      window) flags="--kv-window $((d + n_gen))"; hb=-; db=- ;;
      host) flags="--kv-window $w"; hb=unlimited; db=0 ;;
      hostdisk) flags="--kv-window $w --host-budget $host --disk-budget $disk --spill-dir $spill"
        hb=$host; db=$disk ;;
    esac
    j=$out/tg-d$d-$cfg.json
    # shellcheck disable=SC2086
    "$cli" bench -m "$model" -p 8 -n $n_gen -d "$d" -t "$threads" -r "$r" $flags --json \
      >"$j" 2>"$out/tg-d$d-$cfg.err"
    log "$d $cfg $(field "$j" tg_tokens_per_s tg_tokens_per_s_min tg_tokens_per_s_max window_blocks host_blocks disk_blocks kv_window) $hb $db"
  done
done

# ---- 2. snapshot restore vs re-prefill -------------------------------------------------------
# A prompt of d tokens (BOS included): seeded words cut to length with the model's tokenizer.
make_prompt() {  # make_prompt MODEL N_TOKENS FILE
  python3 - "$1" "$2" "$3" "$cli" <<'EOF'
import random, subprocess, sys
model, target, path, cli = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
random.seed(7)
words = ("once upon a time there was a little girl named lily she liked to play in the park with "
         "her friends one day she saw a big red ball and wanted to play with it her mom said be "
         "careful the sun was shining and the birds were singing they ran and jumped and laughed "
         "all day long tom had a dog called max who loved to run").split()
sent = []
while len(sent) < 4 * target // 10 + 100:
    sent.append(" ".join(random.sample(words, 8)).capitalize() + ".")
text = " ".join(sent)
def count(s):
    open(path, "w").write(s)
    r = subprocess.run([cli, "tokenize", "-m", model, "--file", path], capture_output=True, text=True)
    return len(r.stdout.split())
lo, hi = 0, len(text)
while hi - lo > 1:
    mid = (lo + hi) // 2
    if count(text[:mid]) <= target: lo = mid
    else: hi = mid
print(count(text[:lo]))
EOF
}
log ""
log "snapshot: depth prompt_tokens prefill_s restore_s ratio prefill_computed_after_restore same_tokens"
for d in $snap_depths; do
  p=$out/prompt-$d.txt
  n=$(make_prompt "$model" "$d" "$p")
  snap=$spill/snap-$d.kv
  rm -f "$snap"
  common="-m $model -f $p -n 1 --temp 0 -t $threads --kv-window $((d + 64)) --json"
  t0=$(now)
  # shellcheck disable=SC2086
  "$cli" generate $common --save-kv "$snap" --stats-json "$out/snap-$d-save.jsonl" \
    >"$out/snap-$d-save.json" 2>"$out/snap-$d-save.err"
  t1=$(now)
  # shellcheck disable=SC2086
  "$cli" generate $common --load-kv "$snap" --stats-json "$out/snap-$d-load.jsonl" \
    >"$out/snap-$d-load.json" 2>"$out/snap-$d-load.err"
  t2=$(now)
  log "$d $n $(python3 - "$t0" "$t1" "$t2" "$out/snap-$d-save.json" "$out/snap-$d-load.json" "$out/snap-$d-load.jsonl" "$snap" <<'EOF'
import json, os, sys
t0, t1, t2 = map(float, sys.argv[1:4])
a, b = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
steps = [json.loads(l) for l in open(sys.argv[6]) if l.strip()]
computed = max(s["prefill_tokens_computed"] for s in steps)
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {(t1 - t0) / (t2 - t1):.1f} {computed} "
      f"{a['generated_tokens'] == b['generated_tokens']} (snapshot {os.path.getsize(sys.argv[7])} bytes)")
EOF
)"
  rm -f "$snap"
done

# ---- 3. approximate attention vs exact -------------------------------------------------------
# stories260K (a trained model; context 2048): a 1790-token prompt + 256 greedy steps, blocks of
# 64 tokens and a 256-token window, so most of the KV is cold and topk:8 picks 8 of ~30 blocks.
if [ "${AGREE:-1}" != 0 ]; then
log ""
sp=$out/prompt-stories.txt
n=$(make_prompt "$stories" 1790 "$sp")
log "agreement: stories260K, prompt $n tokens, 256 steps, --kv-block 64 --kv-window 256"
for mode in exact streaming topk:8; do
  f=$(echo "$mode" | tr : _)
  "$cli" generate -m "$stories" -f "$sp" -n 256 --temp 0 -t "$threads" --kv-block 64 \
    --kv-window 256 --attention "$mode" --json >"$out/agree-$f.json" 2>"$out/agree-$f.err"
done
log "mode prefix_agree overall_agree n"
for mode in streaming topk_8; do
  log "$mode $(python3 - "$out/agree-exact.json" "$out/agree-$mode.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["generated_tokens"]
b = json.load(open(sys.argv[2]))["generated_tokens"]
n = min(len(a), len(b))
prefix = next((i for i in range(n) if a[i] != b[i]), n)
same = sum(1 for i in range(n) if a[i] == b[i])
print(f"{prefix / n:.3f} ({prefix}/{n}) {same / n:.3f} ({same}/{n}) {n}")
EOF
)"
done
fi
log ""
log "end: $(date -u)  uptime: $(uptime)"
