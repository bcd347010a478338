#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer + UndefinedBehaviorSanitizer) and runs
# each from its seed corpus for a bounded time.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET (default 20)] [BUILD_DIR (default build-fuzz)]
# A crash leaves its input in BUILD_DIR/crash-* and exits non-zero; copy it into the target's
# corpus folder and add a regression test beside the code it broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
secs=${1:-20}
out=${2:-build-fuzz}
mkdir -p "$out"
cxx=(clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)

build() {  # name sources...
  local name=$1; shift
  if [[ ! -x $out/$name || -n $(find "$@" tests/fuzz/run.sh -newer "$out/$name" 2>/dev/null) ]]; then
    echo "building $name"
    "${cxx[@]}" "$@" -o "$out/$name" -lfmt
  fi
}
build fuzz_http_request tests/fuzz/fuzz_http_request.cpp app/serve/http_head.cpp \
  app/serve/openai_json.cpp
build fuzz_gguf tests/fuzz/fuzz_gguf.cpp engine/gguf/gguf.cpp engine/gguf/ggml_types.cpp \
  engine/gguf/ggml_low_bit.cpp

for t in http_request gguf; do
  work=$out/corpus-$t
  mkdir -p "$work"
  echo "fuzzing $t for ${secs} s"
  # New inputs go to the scratch corpus; the checked-in seeds are only read.
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./fuzz_$t" -max_total_time="$secs" \
    -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    "corpus-$t" "$root/tests/fuzz/corpus/$t" 2>&1 | tail -n 12)
done
