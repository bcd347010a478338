#!/bin/sh
# Writes the benchmark models of the architectures issue (17): one mixture of experts, one
# Gemma-3-shaped model and a dense llama with the same parameters active per token, all with
# the attention of the issue-4 benchmark models (d_model 1024, 16 layers, 16 heads of 64, 4 KV
# heads, vocab 32000, context 4096), in the Q4_K_M mix, seeded random blocks (--fast-random).
#
#   tests/bench/make_arch_bench_models.sh [OUT_DIR [SPILLWAY_TESTMODEL]]
#
#   dense-a170m-q4_k_m.gguf     llama, n_ff 1536
#   qwen3moe-a170m-q4_k_m.gguf  qwen3moe, 8 experts of n_ff 768, 2 used (the dense FFN's
#                               parameters per token; 4x the FFN parameters in all)
#   gemma3-170m-q4_k_m.gguf     gemma3, n_ff 1536, sliding window 512 on 13 of 16 layers
#                               (Gemma 3 1B's window), GeGLU, post-norms, tied output
# OUT_DIR defaults to build/bench-models, the tool to build/tests/spillway-testmodel.
set -eu

out=${1:-build/bench-models}
tool=${2:-build/tests/spillway-testmodel}
if [ ! -x "$tool" ]; then
  echo "error: $tool not found or not executable (build the spillway-testmodel target)" >&2
  exit 1
fi
mkdir -p "$out"

gen() {
  file=$1
  shift
  "$tool" -o "$out/$file" "$@" --fast-random --mix q4_k_m --n-embd 1024 --n-layer 16 \
    --n-head 16 --n-head-kv 4 --head-dim 64 --n-vocab 32000 --ctx 4096 --seed 1
}

gen dense-a170m-q4_k_m.gguf --arch llama --n-ff 1536
gen qwen3moe-a170m-q4_k_m.gguf --arch qwen3moe --n-ff 1536 --n-expert 8 --n-expert-used 2 \
  --n-ff-exp 768
gen gemma3-170m-q4_k_m.gguf --arch gemma3 --n-ff 1536 --sliding-window 512
