#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer + UndefinedBehaviorSanitizer) and runs
# each from its seed corpus for a bounded time.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET (default 20)] [BUILD_DIR (default build-fuzz)]
#   tests/fuzz/run.sh --seeds [BUILD_DIR]   rewrites corpus/kv_snapshot with the engine's writer
# A crash leaves its input in BUILD_DIR/crash-* and exits non-zero; copy it into the target's
# corpus folder and add a regression test beside the code it broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
seeds=0
if [[ ${1:-} == --seeds ]]; then seeds=1; shift; set -- 0 "$@"; fi
secs=${1:-20}
out=${2:-build-fuzz}
mkdir -p "$out/obj"
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
cxx=(clang++ -std=c++20 -g -O1 "${san[@]}" -I.)

# The engine code a target links is compiled once per change into objects, instrumented for the
# sanitizers and for coverage, each SIMD unit with its own target flags as engine/CMakeLists.txt
# compiles it.
objs=()
compile() {  # [--gcc] source [flags...]
  local cc=("${cxx[@]}" -fsanitize=fuzzer-no-link)
  if [[ $1 == --gcc ]]; then cc=(g++ -std=c++20 -g -O1 -I.); shift; fi
  local src=$1; shift
  local o=$out/obj/${src//\//_}.o
  if [[ ! -f $o || $src -nt $o || tests/fuzz/run.sh -nt $o ||
    -n $(find engine -name '*.h' -newer "$o" -print -quit) ]]; then
    echo "compiling $src"
    "${cc[@]}" "$@" -c "$src" -o "$o"
  fi
  objs+=("$o")
}
build() {  # name sources... (with the objects compile() added since the last build())
  local name=$1; shift
  if [[ ! -x $out/$name || -n $(find "$@" "${objs[@]}" tests/fuzz/run.sh tests/fuzz/*.h \
    -newer "$out/$name" 2>/dev/null) ]]; then
    echo "building $name"
    "${cxx[@]}" -fsanitize=fuzzer "$@" "${objs[@]}" -o "$out/$name" -lfmt -lzstd -lxxhash
  fi
  objs=()
}

# The KV snapshot reader and what it links: the cache, its layer groups (sliding windows), its
# tiers and its row conversions.
kv_sources=(engine/kv/snapshot.cpp engine/kv/kv_type_label.cpp engine/kv/kv_cache.cpp
  engine/kv/kv_cache_set.cpp
  engine/kv/kv_storage.cpp engine/kv/spill_file.cpp engine/kv/spill_queue.cpp
  engine/kv/tier_policy.cpp engine/common/huge_pages.cpp engine/common/numa.cpp
  engine/common/output_path.cpp engine/common/size.cpp engine/gguf/ggml_types.cpp
  engine/gguf/ggml_low_bit.cpp engine/cpu/ops.cpp engine/cpu/ops_scalar.cpp
  engine/cpu/quant_scalar.cpp)
compile_kv() {
  local s
  for s in "${kv_sources[@]}"; do compile "$s"; done
  # The SIMD level chooser asks __builtin_cpu_supports("f16c"), which GCC knows and clang 14 does
  # not: compiled by g++, without instrumentation (it only reads CPUID).
  compile --gcc engine/cpu/simd.cpp
  case $(uname -m) in
    x86_64)
      local avx2=(-mavx2 -mfma -mf16c -ffp-contract=off)
      compile engine/cpu/simd_avx2_ops.cpp "${avx2[@]}"
      compile engine/cpu/simd_avx2_quant.cpp "${avx2[@]}"
      compile engine/cpu/simd_avx512_quant.cpp "${avx2[@]}" -mavx512f -mavx512bw -mavx512vl \
        -mavx512vnni
      compile engine/cpu/simd_avx512_ops.cpp "${avx2[@]}" -mavx512f -mavx512bw -mavx512vl \
        -mavx512vnni
      ;;
    aarch64)
      compile engine/cpu/simd_neon_quant.cpp -ffp-contract=off
      compile engine/cpu/simd_neon_dotprod_quant.cpp -march=armv8.2-a+dotprod -ffp-contract=off
      ;;
  esac
}

if ((seeds)); then
  compile_kv
  echo "building make_kv_snapshot_seeds"
  "${cxx[@]}" tests/fuzz/make_kv_snapshot_seeds.cpp "${objs[@]}" -fsanitize=fuzzer-no-link \
    -o "$out/make_kv_snapshot_seeds" -lfmt -lzstd -lxxhash
  rm -f tests/fuzz/corpus/kv_snapshot/*.kv
  mkdir -p tests/fuzz/corpus/kv_snapshot
  "$out/make_kv_snapshot_seeds" tests/fuzz/corpus/kv_snapshot
  exit 0
fi

build fuzz_http_request tests/fuzz/fuzz_http_request.cpp app/serve/http_head.cpp \
  app/serve/openai_json.cpp
build fuzz_gguf tests/fuzz/fuzz_gguf.cpp engine/gguf/gguf.cpp engine/gguf/ggml_types.cpp \
  engine/gguf/ggml_low_bit.cpp
compile_kv
build fuzz_kv_snapshot tests/fuzz/fuzz_kv_snapshot.cpp

for t in http_request gguf kv_snapshot; do
  work=$out/corpus-$t
  mkdir -p "$work"
  echo "fuzzing $t for ${secs} s"
  # New inputs go to the scratch corpus; the checked-in seeds are only read.
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./fuzz_$t" -max_total_time="$secs" \
    -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    "corpus-$t" "$root/tests/fuzz/corpus/$t" 2>&1 | tail -n 12)
done
