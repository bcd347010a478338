#!/bin/sh
# Writes the benchmark models of issue 4 (the shape of a small real Llama: d_model 1024,
# 16 layers, 16 heads, 4 KV heads, ffn 2816, vocab 32000, context 4096; about 250M parameters)
# in F16, Q8_0 and the Q4_K_M mix, and (issue 17) the Q3_K_M and IQ4_XS mixes, with seeded
# random weights.
#
#   tests/bench/make_bench_models.sh [OUT_DIR [SPILLWAY_TESTMODEL]]
#
# OUT_DIR defaults to build/bench-models, the tool to build/tests/spillway-testmodel (build it
# first: cmake --build build --target spillway-testmodel). Run from the repository root.
# Files: llama-250m-f16.gguf (~500 MB), llama-250m-q8_0.gguf (~265 MB),
# llama-250m-q4_k_m.gguf (~150 MB), llama-250m-q3_k_m.gguf (~125 MB), llama-250m-iq4_xs.gguf
# (~140 MB). Existing files are rewritten (the bytes are the same).
set -eu

out=${1:-build/bench-models}
tool=${2:-build/tests/spillway-testmodel}
if [ ! -x "$tool" ]; then
  echo "error: $tool not found or not executable (build the spillway-testmodel target)" >&2
  exit 1
fi
mkdir -p "$out"

# gen FILE TYPE-ARGS...: one model of the benchmark shape.
gen() {
  file=$1
  shift
  "$tool" -o "$out/$file" "$@" --arch llama --n-embd 1024 --n-layer 16 --n-head 16 \
    --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --ctx 4096 --seed 1
}

gen llama-250m-f16.gguf --type F16
gen llama-250m-q8_0.gguf --type Q8_0
gen llama-250m-q4_k_m.gguf --mix q4_k_m
gen llama-250m-q3_k_m.gguf --mix q3_k_m
gen llama-250m-iq4_xs.gguf --mix iq4_xs
