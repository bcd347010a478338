// spillway-cli bench: prompt-processing and token-generation throughput of one model, measured
// as llama-bench measures them, with the effective memory bandwidth of decoding, the machine's
// read bandwidth from a short probe, and the process's peak resident set size.
//
//   pp: one eval of n_prompt seeded random token ids (logits for the last) into a fresh session.
//   tg: n_gen single-token evals one after another into a fresh session, each with logits.
//       With -d N (depth), each repeat's fresh session first prefills N seeded random tokens,
//       untimed, so the timed steps read N + 1 ... N + n_gen cached positions (pp unaffected).
// Each of the `reps` repeats starts from an empty cache; the median, min and max tokens/s are
// reported. Effective tg bandwidth = bytes read per generated token x tg tokens/s, where the
// bytes are every 2-D weight the forward pass reads (all layer matrices and output.weight,
// which is token_embd.weight when the embeddings are tied; token_embd's one looked-up row is
// left out) plus the KV cache read, averaged over the n_gen steps.
//
// The compute roofline: after the runs, FP32 FMA and int8 dot-product probes on the same threads
// (engine/cpu/compute_probe.h, best of 3) give "peak_gflops_per_s" and "peak_int8_gops_per_s";
// "pp_gflops_per_s" is the prefill's FLOPs (2 x every layer matrix's multiply-adds per token,
// output.weight once, attention 2 x n_head x (head_dim + head_dim_v) per causal (query, key)
// pair per layer; "pp_flops") x pp tokens/s / n_prompt; "pp_attention_share" is attention's
// thread-seconds (SessionUsage window + cold + merge) over prefill's (wall x threads) summed
// over the pp repeats, 0 where the fast CPU session did not run.
#pragma once

#include <cstdint>
#include <string>

#include "app/cli/kv_options.h"
#include "engine/backend/device.h"
#include "engine/common/expected.h"

namespace CLI {
class App;
}

namespace spw::cli {

/// Adds -d/--depth (BenchArgs::depth) to a bench command (spillway-cli bench, spillway-bench).
void add_depth_option(CLI::App& sub, int& depth);

struct BenchArgs;
/// Adds -p, -n, -t and -r, each checked against its range (app/cli/option_checks.h).
void add_bench_count_options(CLI::App& sub, BenchArgs& a);

struct BenchArgs {
  std::string model;
  int n_prompt = 512;           // -p: tokens of the pp test
  int n_gen = 128;              // -n: tokens of the tg test
  int n_threads = 0;            // -t; 0: all cores (the probe uses as many)
  int reps = 3;                 // -r: repeats of each test
  int depth = 0;                // -d: context depth of the tg test (llama-bench's -d)
  bool reference = false;       // --reference: time the float64 ReferenceSession instead
  bool json = false;            // --json: stdout is exactly one JSON object
  std::string device = "auto";  // --device: auto | cpu | cuda
  KvArgs kv;  // --kv-block, --kv-window, --kv-sinks, budgets, --spill-dir, --ubatch, --attention
};

/// `device` ("auto" | "cpu" | "cuda", the --device flag) picks the fast path's backend once, for
/// every session of the run (engine/backend/device.h); the table and the JSON name it ("device":
/// "cpu" | "cuda", "backend": "cpu (avx2, 2 threads)"). --reference always runs on the CPU.
/// Errors (stderr, exit 1): n_prompt, n_gen or reps below 1, depth negative, depth + n_gen
/// longer than the model's context, n_threads negative, an unknown
/// device, --reference with device cuda, --device cuda without a usable GPU, n_prompt longer
/// than the model's context (pp and tg run on sessions of their own), a model that does not
/// load, an eval error.
/// The tiered KV cache's flags (KvArgs, kv_options.h) configure the fast CPU session of every
/// repeat; the JSON names them ("attention", "kv_block", "kv_window", "kv_sinks": the window as
/// applied, auto resolved) with the tiers the last tg repeat ended with ("window_blocks",
/// "host_blocks", "disk_blocks"; 0 off the CPU session). Progress lines and a device note ("note:
/// CUDA unavailable (...); running on the CPU") go to stderr; stdout has only the table (or the
/// JSON object).
int run_bench(const BenchArgs& a);

}  // namespace spw::cli
