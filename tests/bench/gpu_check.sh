#!/usr/bin/env bash
# gpu_check.sh: build the CUDA parts on a bare GPU machine, run their tests, a memcheck of the
# kernel tests and a benchmark of a Llama-3-8B-shaped Q4_K_M model, all in one call.
#
#   bash tests/bench/gpu_check.sh prepare
#       Here, before the device call: stages .devdeps/ in the repo root (headers, googletest
#       source, static PCRE2, zstd and xxHash, stories260K.gguf) for a machine without -dev
#       packages.
#   bash tests/bench/gpu_check.sh run
#       On the device machine, from the repo root, with $OUT set (carry [".devdeps"]). Stages:
#         1 build   configure (SPILLWAY_DEVICE_ONLY, sm_90, Release, Ninja) and build, all cores
#         2 tests   nvidia-smi, spillway_cuda_tests (XML), spillway_engine_tests
#         3 memchk  compute-sanitizer memcheck on the kernel tests and the tiered session test,
#                   racecheck on the paged attention / KV-write kernels
#         4 bench   8B-shaped Q4_K_M model (--fast-random) into /tmp; spillway-bench on cuda,
#                   then a short cpu run for the ratio, then decode at 8K, 32K, 128K depth with
#                   an 8K-token GPU window (the rest in host RAM): tokens/s, PCIe bytes per token,
#                   VRAM used vs planned
#       Each stage checks the time left of SPW_GPU_BUDGET_S (default 540 s) and is skipped,
#       with a line saying so, when too little is left. A failed stage is recorded and the
#       next one still runs where it can. At most 11 files land in $OUT (logs trimmed to their
#       last 4 MiB); the summary table is the last thing printed.
#
# Settings (environment): SPW_GPU_BUDGET_S (540), SPW_GPU_BUILD_DIR (build-gpu),
# SPW_GPU_MODEL (/tmp/spw-llama8b-q4km.gguf), SPW_GPU_ARCH (90), SPW_GPU_MODEL_LAYERS (32).
set -u

# Kernel tests for memcheck: the suites of these files (TEST/TEST_F/TEST_P names, read from the
# sources when the stage runs). Set SANITIZER_FILTER to a gtest filter to override.
SANITIZER_SOURCES="tests/cuda/test_cuda_quant.cpp tests/cuda/test_cuda_ops.cpp tests/cuda/test_cuda_paged.cpp"
# racecheck (shared-memory hazards) on the paged attention and KV-write kernels, and the tiered
# session test (split attention, spills on the copy stream).
RACECHECK_FILTER="${RACECHECK_FILTER:-*PagedAttention.*:PagedKvStore.*}"
MEMCHECK_TIERED_FILTER="${MEMCHECK_TIERED_FILTER:-CudaTiered.*}"
SANITIZER_FILTER="${SANITIZER_FILTER:-}"

# Llama-3-8B shape, Q4_K_M mix (~4.9 GB). SPW_GPU_MODEL_LAYERS shrinks it for a local dry run.
MODEL_FLAGS="--fast-random --mix q4_k_m --n-vocab 128256 --n-embd 4096
  --n-layer ${SPW_GPU_MODEL_LAYERS:-32} --n-head 32 --n-head-kv 8 --n-ff 14336 --ctx 131072"
# Tiered decode (CUDA part 2): context depths with an 8K-token GPU window, 128K last.
TIERED_DEPTHS="${TIERED_DEPTHS:-8192 32768 131072}"

LOG_KEEP_BYTES=$((4 * 1024 * 1024))

die() {
  echo "gpu_check: $*" >&2
  exit 1
}

repo_root() {
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  (cd "$here/../.." && pwd)
}

# ---- prepare --------------------------------------------------------------------------------

prepare() {
  local root deps lib
  root="$(repo_root)"
  deps="$root/.devdeps"
  rm -rf "$deps"
  mkdir -p "$deps/include" "$deps/lib" "$deps/shared/models" || die "cannot create $deps"

  [ -f /usr/src/googletest/CMakeLists.txt ] || die "/usr/src/googletest missing (apt package googletest)"
  cp -rL /usr/src/googletest "$deps/googletest" || die "copying googletest failed"
  local d
  for d in fmt CLI nlohmann; do
    [ -d "/usr/include/$d" ] || die "/usr/include/$d missing"
    cp -rL "/usr/include/$d" "$deps/include/" || die "copying /usr/include/$d failed"
  done
  cp -L /usr/include/pcre2.h "$deps/include/" || die "/usr/include/pcre2.h missing (libpcre2-dev)"
  lib="$(dpkg -L libpcre2-dev 2>/dev/null | grep '/libpcre2-8\.a$' | head -n 1)"
  if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    die "libpcre2-8.a not found (dpkg -L libpcre2-dev)"
  fi
  cp -L "$lib" "$deps/lib/" || die "copying $lib failed"
  # zstd and xxHash (KV snapshots): headers and static libraries, as PCRE2.
  local pkg a h f
  for pkg in libzstd-dev:libzstd.a:"zstd.h zstd_errors.h" libxxhash-dev:libxxhash.a:"xxhash.h xxh3.h"; do
    IFS=: read -r pkg a h <<<"$pkg"
    for f in $h; do
      cp -L "/usr/include/$f" "$deps/include/" || die "/usr/include/$f missing ($pkg)"
    done
    lib="$(dpkg -L "$pkg" 2>/dev/null | grep "/$a\$" | head -n 1)"
    if [ -z "$lib" ] || [ ! -f "$lib" ]; then
      die "$a not found (dpkg -L $pkg)"
    fi
    cp -L "$lib" "$deps/lib/" || die "copying $lib failed"
  done

  local models="$root/../shared/models" f
  for f in stories260K.gguf stories260K.reference.json; do
    if [ -f "$models/$f" ]; then
      cp -L "$models/$f" "$deps/shared/models/"
    else
      echo "gpu_check: $models/$f not found; tests that need it will skip"
    fi
  done

  local bytes tree_bytes
  bytes=$(du -sb "$deps" | cut -f1)
  # What else travels: tracked and untracked-not-ignored files.
  tree_bytes=$(cd "$root" && git ls-files -z -co --exclude-standard 2>/dev/null |
    xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  echo "staged $deps: $(numfmt --to=iec "$bytes") ($bytes bytes)"
  echo "working tree without it: $(numfmt --to=iec "$tree_bytes"); together" \
    "$(numfmt --to=iec $((bytes + tree_bytes))) of the 64 MiB limit"
  [ $((bytes + tree_bytes)) -lt $((56 * 1024 * 1024)) ] ||
    echo "gpu_check: WARNING: close to the 64 MiB limit of what travels"
}

# ---- run ------------------------------------------------------------------------------------

BUDGET=0
T0=0
STAGES=()   # "name|status|seconds|note"

left() { echo $((BUDGET - (SECONDS - T0))); }

record() {  # name status t_start note
  STAGES+=("$1|$2|$((SECONDS - $3))|$4")
  echo "== $1: $2 ($((SECONDS - $3)) s) $4"
}

# enough NAME SECONDS: true when SECONDS are left, else records NAME as skipped.
enough() {
  local l
  l=$(left)
  if [ "$l" -lt "$2" ]; then
    STAGES+=("$1|SKIPPED|0|needs ${2} s, ${l} s left")
    echo "== $1: SKIPPED (needs $2 s, $l s left of the ${BUDGET} s budget)"
    return 1
  fi
  return 0
}

# limit WANT: seconds a step may take: WANT, or less when the budget (minus a reserve for the
# summary) is shorter.
limit() {
  local l
  l=$(($(left) - 15))
  [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"
}

trim() {  # keep the last LOG_KEEP_BYTES of each file
  local f
  for f in "$@"; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt "$LOG_KEEP_BYTES" ]; then
      tail -c "$LOG_KEEP_BYTES" "$f" >"$f.tmp" && mv "$f.tmp" "$f"
    fi
  done
}

# gtest_counts LOG: "P passed, F failed, S skipped" from a gtest log.
gtest_counts() {
  local p f s
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$1" | tail -n 1 | grep -oE '[0-9]+' | head -n 1)
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$1" | tail -n 1 | grep -oE '[0-9]+' | head -n 1)
  s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$1" | tail -n 1 | grep -oE '[0-9]+' | head -n 1)
  echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
}

# json_field FILE KEY: one number from a one-object JSON file ("" when absent).
json_field() {
  [ -s "$1" ] || return 0
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys
try:
    v = json.load(open(sys.argv[1])).get(sys.argv[2])
    print("" if v is None else (f"{v:.2f}" if isinstance(v, float) else v))
except Exception:
    pass' "$1" "$2"
  else
    grep -oE "\"$2\":[^,}]*" "$1" | head -n 1 | cut -d: -f2
  fi
}

run() {
  : "${OUT:?set OUT to the folder for the results}"
  mkdir -p "$OUT" || die "cannot create $OUT"
  local root build model arch jobs
  root="$(repo_root)"
  cd "$root" || die "cannot cd to $root"
  BUDGET="${SPW_GPU_BUDGET_S:-540}"
  T0=$SECONDS
  build="${SPW_GPU_BUILD_DIR:-build-gpu}"
  model="${SPW_GPU_MODEL:-/tmp/spw-llama8b-q4km.gguf}"
  arch="${SPW_GPU_ARCH:-90}"
  jobs=$(nproc)
  local summary="$OUT/summary.txt" blog="$OUT/build.log" tlog="$OUT/tests.log"
  local slog="$OUT/sanitizer.log" bnlog="$OUT/bench.log"
  local xml="$OUT/cuda_tests.xml" bcuda="$OUT/bench_cuda.json" bcpu="$OUT/bench_cpu.json"
  : >"$summary"
  echo "gpu_check run: budget ${BUDGET} s, $jobs cores, build dir $build, results in $OUT"

  # ---- 1 build
  local t rc
  t=$SECONDS
  {
    echo "# $(date -u +%FT%TZ) $(uname -srm)"
    git rev-parse HEAD 2>/dev/null | sed 's/^/# commit /'
    cmake --version | head -n 1
    (command -v nvcc >/dev/null && nvcc --version | tail -n 2) ||
      (/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -n 2) || echo "nvcc: not found"
    "${CXX:-c++}" --version 2>/dev/null | head -n 1
    ninja --version 2>/dev/null | sed 's/^/ninja /'
  } >"$blog" 2>&1
  echo "tools: $(sed -n '3,7p' "$blog" | grep -vE '^Build ' | tr '\n' ';' | sed 's/;$//; s/;/; /g')" |
    tee -a "$summary"
  local cfg=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPILLWAY_DEVICE_ONLY=ON
    "-DSPILLWAY_DEPS_DIR=$root/.devdeps" "-DSPILLWAY_SHARED_DIR=$root/.devdeps/shared"
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)
  if [ ! -x /usr/local/cuda/bin/nvcc ] && command -v nvcc >/dev/null; then
    cfg+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  fi
  # CMake 4 refuses googletest's cmake_minimum_required(3.5) without this.
  cmake --version | head -n 1 | grep -qE 'version [4-9]' && cfg+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  [ -d .devdeps ] || echo "gpu_check: no .devdeps here (run 'prepare' and carry it)" | tee -a "$blog"
  echo "== build: configuring and building with $jobs jobs"
  timeout -k 10 "$(limit 400)" cmake "${cfg[@]}" >>"$blog" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    record build FAILED "$t" "configure exit $rc (build.log)"
  else
    timeout -k 10 "$(limit 420)" cmake --build "$build" -j "$jobs" -- -k 0 >>"$blog" 2>&1
    rc=$?
    local built=""
    for b in spillway_cuda_tests spillway_engine_tests spillway-testmodel spillway-bench; do
      [ -x "$build/tests/$b" ] || [ -x "$build/tests/bench/$b" ] || built="$built $b"
    done
    if [ $rc -eq 0 ]; then
      record build ok "$t" "sm_$arch"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      record build FAILED "$t" "timed out${built:+; missing:$built} (build.log)"
    else
      record build FAILED "$t" "exit $rc${built:+; missing:$built} (build.log)"
    fi
  fi
  local cuda_tests="$build/tests/spillway_cuda_tests" engine_tests="$build/tests/spillway_engine_tests"
  local testmodel="$build/tests/spillway-testmodel" bench="$build/tests/bench/spillway-bench"

  # ---- 2 tests
  : >"$tlog"
  if enough tests 30; then
    t=$SECONDS
    {
      echo "### nvidia-smi"
      timeout 30 nvidia-smi 2>&1 || echo "nvidia-smi failed or absent"
    } >>"$tlog" 2>&1
    local gpu
    gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
    echo "gpu: ${gpu:-none seen}" | tee -a "$summary"
    if [ -x "$cuda_tests" ]; then
      echo "### spillway_cuda_tests" >>"$tlog"
      timeout -k 10 "$(limit 180)" "$cuda_tests" "--gtest_output=xml:$xml" >"$OUT/.cuda.log" 2>&1
      rc=$?
      cat "$OUT/.cuda.log" >>"$tlog"
      local counts
      counts=$(gtest_counts "$OUT/.cuda.log")
      rm -f "$OUT/.cuda.log"
      if [ $rc -eq 0 ] && [ "${counts#0 passed}" = "$counts" ]; then
        record cuda_tests ok "$t" "$counts"
      elif [ $rc -eq 0 ]; then
        record cuda_tests SKIPPED "$t" "no GPU test ran: $counts"
      else
        record cuda_tests FAILED "$t" "exit $rc; $counts (tests.log)"
      fi
    else
      record cuda_tests FAILED "$t" "not built"
    fi
    t=$SECONDS
    if [ -x "$engine_tests" ] && enough engine_tests 20; then
      echo "### spillway_engine_tests" >>"$tlog"
      timeout -k 10 "$(limit 120)" "$engine_tests" --gtest_brief=1 >"$OUT/.engine.log" 2>&1
      rc=$?
      cat "$OUT/.engine.log" >>"$tlog"
      local counts
      counts=$(gtest_counts "$OUT/.engine.log")
      rm -f "$OUT/.engine.log"
      if [ $rc -eq 0 ]; then
        record engine_tests ok "$t" "$counts"
      else
        record engine_tests FAILED "$t" "exit $rc; $counts (tests.log)"
      fi
    elif [ ! -x "$engine_tests" ]; then
      record engine_tests FAILED "$t" "not built"
    fi
  fi

  # ---- 3 memcheck
  : >"$slog"
  local sanitizer=""
  sanitizer=$(command -v compute-sanitizer 2>/dev/null || true)
  [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
    sanitizer=/usr/local/cuda/bin/compute-sanitizer
  t=$SECONDS
  if [ -z "$sanitizer" ]; then
    record memcheck SKIPPED "$t" "compute-sanitizer not found"
    echo "compute-sanitizer not found" >"$slog"
  elif [ ! -x "$cuda_tests" ]; then
    record memcheck SKIPPED "$t" "spillway_cuda_tests not built"
  elif enough memcheck 120; then
    local filter="$SANITIZER_FILTER" src suites=""
    if [ -z "$filter" ]; then
      for src in $SANITIZER_SOURCES; do
        [ -f "$src" ] || continue
        suites="$suites $(grep -ohE '^[[:space:]]*TEST(_F|_P)?\([[:space:]]*[A-Za-z0-9_]+' "$src" |
          sed -E 's/.*\([[:space:]]*//')"
      done
      for src in $(echo "$suites" | tr ' ' '\n' | sort -u); do
        filter="${filter:+$filter:}*$src.*"
      done
    fi
    if [ -z "$filter" ]; then
      record memcheck SKIPPED "$t" "no tests found in $SANITIZER_SOURCES"
    else
      echo "filter: $filter" >>"$slog"
      # Leave the bench stage about 150 s.
      local want=$(($(left) - 150))
      [ "$want" -gt 240 ] && want=240
      [ "$want" -lt 60 ] && want=60
      timeout -k 10 "$(limit "$want")" "$sanitizer" --tool memcheck --error-exitcode 86 \
        "$cuda_tests" "--gtest_filter=$filter" >>"$slog" 2>&1
      rc=$?
      local errs
      errs=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$slog" | tail -n 1)
      case $rc in
        0) record memcheck ok "$t" "${errs:-no summary}; $(gtest_counts "$slog")" ;;
        86) record memcheck FAILED "$t" "${errs:-memcheck errors} (sanitizer.log)" ;;
        124|137) record memcheck FAILED "$t" "timed out (sanitizer.log)" ;;
        *) record memcheck FAILED "$t" "exit $rc; ${errs:-}; $(gtest_counts "$slog") (sanitizer.log)" ;;
      esac
    fi
    local tool flt
    for tool in memcheck:"$MEMCHECK_TIERED_FILTER" racecheck:"$RACECHECK_FILTER"; do
      flt=${tool#*:}
      tool=${tool%%:*}
      t=$SECONDS
      enough "${tool}_2" 90 || continue
      echo "### $tool $flt" >>"$slog"
      timeout -k 10 "$(limit 120)" "$sanitizer" --tool "$tool" --error-exitcode 86 \
        "$cuda_tests" "--gtest_filter=$flt" >"$OUT/.san.log" 2>&1
      rc=$?
      cat "$OUT/.san.log" >>"$slog"
      local errs2
      errs2=$(grep -oE '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$OUT/.san.log" | tail -n 1)
      case $rc in
        0) record "${tool}_2" ok "$t" "$flt: ${errs2:-no summary}; $(gtest_counts "$OUT/.san.log")" ;;
        86) record "${tool}_2" FAILED "$t" "$flt: ${errs2:-errors} (sanitizer.log)" ;;
        124|137) record "${tool}_2" FAILED "$t" "$flt: timed out (sanitizer.log)" ;;
        *) record "${tool}_2" FAILED "$t" "$flt: exit $rc; $(gtest_counts "$OUT/.san.log")" ;;
      esac
      rm -f "$OUT/.san.log"
    done
  fi

  # ---- 4 bench
  : >"$bnlog"
  if [ ! -x "$testmodel" ] || [ ! -x "$bench" ]; then
    record bench SKIPPED "$SECONDS" "spillway-testmodel or spillway-bench not built"
  elif enough model 40; then
    t=$SECONDS
    echo "### spillway-testmodel $MODEL_FLAGS" >>"$bnlog"
    # shellcheck disable=SC2086
    timeout -k 10 "$(limit 120)" "$testmodel" -o "$model" $MODEL_FLAGS >>"$bnlog" 2>&1
    rc=$?
    rm -f "$model".tmp.*  # what a write stopped by the timeout leaves
    if [ $rc -ne 0 ]; then
      record model FAILED "$t" "exit $rc (bench.log)"
    else
      record model ok "$t" "$(grep -oE '[0-9]+ MB/s' "$bnlog" | tail -n 1), $(du -h "$model" | cut -f1)"
      t=$SECONDS
      if enough bench_cuda 30; then
        echo "### spillway-bench --device cuda -p 512 -n 128 -r 3" >>"$bnlog"
        timeout -k 10 "$(limit 200)" "$bench" -m "$model" -p 512 -n 128 -r 3 --device cuda --json \
          >"$bcuda" 2>>"$bnlog"
        rc=$?
        if [ $rc -eq 0 ]; then
          record bench_cuda ok "$t" "pp512 $(json_field "$bcuda" pp_tokens_per_s) t/s, tg128 $(json_field "$bcuda" tg_tokens_per_s) t/s, $(json_field "$bcuda" tg_gb_per_s) GB/s"
        else
          record bench_cuda FAILED "$t" "exit $rc: $(tail -n 1 "$bnlog" | cut -c1-300)"
        fi
      fi
      t=$SECONDS
      if enough bench_cpu 30; then
        echo "### spillway-bench --device cpu -p 64 -n 16 -r 1 -t $jobs" >>"$bnlog"
        timeout -k 10 "$(limit 150)" "$bench" -m "$model" -p 64 -n 16 -r 1 -t $jobs --device cpu --json \
          >"$bcpu" 2>>"$bnlog"
        rc=$?
        if [ $rc -eq 0 ]; then
          record bench_cpu ok "$t" "pp64 $(json_field "$bcpu" pp_tokens_per_s) t/s, tg16 $(json_field "$bcpu" tg_tokens_per_s) t/s, $(json_field "$bcpu" tg_gb_per_s) GB/s"
        else
          record bench_cpu FAILED "$t" "exit $rc: $(tail -n 1 "$bnlog" | cut -c1-300)"
        fi
      fi
      # Tiered decode: -d DEPTH, 8K window on the GPU, the rest in host RAM (exact split).
      local d tj
      for d in $TIERED_DEPTHS; do
        t=$SECONDS
        local need=60
        [ "$d" -gt 65536 ] && need=200
        enough "tiered_$d" "$need" || continue
        tj="$OUT/tiered_$d.json"
        echo "### spillway-bench --device cuda -p 8 -n 32 -r 1 -d $d --kv-window 8192" >>"$bnlog"
        timeout -k 10 "$(limit 300)" "$bench" -m "$model" -p 8 -n 32 -r 1 -d "$d" --kv-window 8192 \
          -t "$jobs" --device cuda --json >"$tj" 2>>"$bnlog"
        rc=$?
        if [ $rc -eq 0 ]; then
          record "tiered_$d" ok "$t" "tg32 $(json_field "$tj" tg_tokens_per_s) t/s; window/host blocks $(json_field "$tj" window_blocks)/$(json_field "$tj" host_blocks); PCIe $(json_field "$tj" pcie_bytes_per_token) B/token; VRAM used $(json_field "$tj" vram_used_bytes) planned $(json_field "$tj" vram_planned_bytes); cold->GPU in decode $(json_field "$tj" decode_cold_to_device_bytes); RAM probe $(json_field "$tj" probe_gb_per_s) GB/s"
        else
          record "tiered_$d" FAILED "$t" "exit $rc: $(tail -n 1 "$bnlog" | cut -c1-300)"
          rm -f "$tj"
        fi
      done
      local pc tc pu tu
      pc=$(json_field "$bcuda" pp_tokens_per_s)
      tc=$(json_field "$bcuda" tg_tokens_per_s)
      pu=$(json_field "$bcpu" pp_tokens_per_s)
      tu=$(json_field "$bcpu" tg_tokens_per_s)
      if [ -n "$pc" ] && [ -n "$pu" ] && [ -n "$tc" ] && [ -n "$tu" ]; then
        echo "cuda/cpu: pp x$(awk -v a="$pc" -v b="$pu" 'BEGIN {printf "%.1f", b > 0 ? a / b : 0}')," \
          "tg x$(awk -v a="$tc" -v b="$tu" 'BEGIN {printf "%.1f", b > 0 ? a / b : 0}')" \
          "(cpu: pp64/tg16, 16 threads)" | tee -a "$summary"
      fi
    fi
    rm -f "$model"
  fi
  [ -s "$bcuda" ] || rm -f "$bcuda"
  [ -s "$bcpu" ] || rm -f "$bcpu"

  # ---- results
  trim "$blog" "$tlog" "$slog" "$bnlog"
  # Where a stage failed, the end of its log (the full logs come back in $OUT).
  local s name status
  for s in "${STAGES[@]}"; do
    IFS='|' read -r name status _ _ <<<"$s"
    [ "$status" = FAILED ] || continue
    case $name in
      build)
        echo "--- build.log (errors, else its end)"
        grep -E 'error|FAILED' "$blog" | head -n 15 | grep . || tail -n 5 "$blog"
        ;;
      cuda_tests|engine_tests) echo "--- tests.log (failures)"; grep -E '^\[  FAILED  \]|Failure' "$tlog" | head -n 15 ;;
      memcheck) echo "--- sanitizer.log"; grep -E '=========' "$slog" | head -n 15 ;;
    esac
  done
  {
    printf '%-13s %-8s %6s  %s\n' stage status seconds note
    for s in "${STAGES[@]}"; do
      IFS='|' read -r name status secs note <<<"$s"
      printf '%-13s %-8s %6s  %s\n' "$name" "$status" "$secs" "$note"
    done
    echo "total $((SECONDS - T0)) s of ${BUDGET} s; files: $(cd "$OUT" && find . -maxdepth 1 -type f -printf '%f ')"
  } >>"$summary"
  echo
  echo "===== gpu_check summary ====="
  cat "$summary"
  # Exit status: 1 when any stage failed (skipped stages do not count).
  for s in "${STAGES[@]}"; do
    case $s in *"|FAILED|"*) return 1 ;; esac
  done
  return 0
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *)
    echo "usage: $0 prepare|run" >&2
    exit 2
    ;;
esac
