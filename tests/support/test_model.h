// Random, reproducible GGUF models of every architecture the loader reads, for tests (and
// `spillway-testmodel`): llama (with n_expert > 0 the Mixtral layout), qwen2, qwen3, qwen2moe,
// qwen3moe, phi3, gemma3.
//
// A test model has every key and tensor a real converted model has, spelled as llama.cpp's
// converter spells them, filled with seeded random values: the same spec gives the same file
// byte for byte. Shapes are small enough that a whole model loads in milliseconds.
//
// Block-size rule: every row length (n_embd, n_head * head_dim, n_ff) must be a multiple of
// the block size of the type that stores it: 32 for Q4_0..Q8_0 and IQ4_NL, 256 for the K-quants
// and IQ4_XS (use n_embd = 256, n_ff = 512, n_head * head_dim = 256 with Q2_K..Q6_K, IQ4_XS or a
// mix). A spec that breaks the
// rule is refused by check_test_model_spec() with a message naming the tensor and the sizes;
// nothing is rounded silently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/expected.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "tests/support/quant_mix.h"

namespace spw {

/// What to build. Defaults give a ~0.3 MB F32 llama with GQA (4 query heads, 2 KV heads).
struct TestModelSpec {
  /// llama | qwen2 | qwen3 | qwen2moe | qwen3moe | phi3 | gemma3; any other string builds an
  /// unknown-arch file. phi3 writes the fused attn_qkv and gate+up ffn_up; gemma3 the QK-norms,
  /// post-norms and tied embeddings, its layers sliding except every sixth (sliding_window).
  std::string arch = "llama";
  GgmlType weight_type = GgmlType::F32;  ///< 2-D matrices: attn_q/k/v/output, ffn_gate/up/down
  std::optional<GgmlType> embd_type;     ///< token_embd.weight; weight_type when unset
  std::optional<GgmlType> output_type;   ///< output.weight; weight_type when unset
  int64_t n_vocab = 320;                 ///< >= 260: 3 specials + 256 byte tokens + "▁"
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;  ///< must divide n_head
  int64_t head_dim =
      16;  ///< even; key_length/value_length are written when != n_embd / n_head (always for qwen3)
  int64_t n_ff = 96;
  int64_t n_ctx = 256;           ///< <arch>.context_length
  bool tied_embeddings = false;  ///< omit output.weight (logits use token_embd.weight)
  bool rope_freqs = false;       ///< add rope_freqs.weight [n_rot / 2] (Llama 3.1 style factors)
  /// phi3: add rope_factors_long.weight and rope_factors_short.weight [n_rot / 2] (LongRoPE).
  bool rope_factors = false;
  int64_t n_rot = 0;  ///< rope.dimension_count; 0: head_dim (phi3 partial rotary: less)
  /// RoPE scaling keys, written only when set: rope.scaling.type ("none", "linear", "yarn",
  /// "longrope", "llama3"), rope.scaling.factor, the legacy rope.scale_linear,
  /// rope.scaling.original_context_length, rope.scaling.attn_factor.
  std::string rope_scaling;
  float rope_factor = 0.0f;
  float rope_scale_linear = 0.0f;
  int64_t rope_orig_ctx = 0;
  float rope_attn_factor = 0.0f;
  /// <arch>.attention.sliding_window (0: not written). gemma3 needs one (default 0 -> 16).
  int64_t sliding_window = 0;
  /// Experts (llama: the Mixtral layout; qwen2moe/qwen3moe need them): <arch>.expert_count,
  /// .expert_used_count, the experts' width (.expert_feed_forward_length for the Qwen MoE
  /// archs; 0: n_ff) and qwen2moe's shared expert's (0: n_ff). The router ffn_gate_inp is F32
  /// (llama.cpp never quantizes it); the expert stacks are weight_type.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  uint32_t seed = 1;
  uint32_t gguf_version = 3;  ///< 2 or 3
  uint32_t alignment = 32;    ///< general.alignment; written as a key when != 32
  /// Quantization mix overriding weight_type, embd_type and output_type: "" (none: those three
  /// fields decide) or one of quant_mix_names() (tests/support/quant_mix.h): "q4_k_m", "q3_k_m",
  /// "iq4_xs", ... the types llama.cpp's quantizer gives each tensor of such a file (q4_k_m: Q4_K,
  /// with Q6_K for output.weight, every attn_v.weight and the ffn_down.weight of the layers
  /// use_more_bits() picks; q3_k_m: Q3_K, with Q6_K for output.weight, Q4_K for attn_output, the
  /// later attn_v and ffn_down, Q5_K for the first two attn_v and the first sixteenth of
  /// ffn_down). Every mix holds K-quants: row lengths multiples of 256.
  std::string mix;
  /// Multiplier on the default weight spread: a matrix with n_in inputs draws uniformly with
  /// standard deviation weight_scale / sqrt(n_in), so activations stay O(1) through the layers.
  float weight_scale = 1.0f;

  GgmlType embd() const;
  GgmlType output() const;
  /// The RoPE dimensions: n_rot, or head_dim when 0.
  int64_t rot() const { return n_rot > 0 ? n_rot : head_dim; }
  /// The experts' width and the shared expert's, defaults applied.
  int64_t ff_exp() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
  int64_t ff_shexp() const { return n_ff_shexp > 0 ? n_ff_shexp : n_ff; }
  /// gemma3's window, default applied.
  int64_t swa() const { return sliding_window > 0 || arch != "gemma3" ? sliding_window : 16; }
  /// Type of blk.<layer>.<role>.weight for role attn_q, attn_k, attn_v, attn_qkv, attn_output,
  /// ffn_gate, ffn_up or ffn_down (also their _exps and _shexp forms) (the mix decides when
  /// set, weight_type otherwise).
  GgmlType layer_type(const std::string& role, int64_t layer) const;
  /// What the mix's rules read for a tensor of `layer` (quant_mix.h).
  MixContext mix_context(int64_t layer) const;
};

/// One tensor of a TestModel, already in its stored form (quantized bytes).
struct TestTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;    ///< ggml order: ne[0] is the row length
  std::vector<uint8_t> data;  ///< exactly row_size(type, ne[0]) * rows bytes
};

/// A test model before serialization: editable, so tests can drop a tensor, change a shape,
/// a type or a key and then write the result (hostile and negative tests start from here).
struct TestModel {
  uint32_t gguf_version = 3;
  uint32_t alignment = 32;
  std::vector<std::pair<std::string, GgufWriteValue>> kv;  ///< in write order
  std::vector<TestTensor> tensors;                         ///< in write order

  /// nullptr when absent.
  TestTensor* find_tensor(const std::string& name);
  /// Removes the tensor; false when it was not there.
  bool drop_tensor(const std::string& name);
  /// Adds or replaces a key (keeps its position when replacing).
  void set(const std::string& key, GgufWriteValue value);
  /// Removes the key; false when it was not there.
  bool drop_key(const std::string& key);

  GgufWriter to_writer() const;
  std::vector<uint8_t> serialize() const { return to_writer().serialize(); }
  Status write(const std::string& path) const { return to_writer().write(path); }
};

/// Ok, or an error naming the first violated rule (vocabulary too small, n_head_kv does not
/// divide n_head, odd head_dim, a row length that is not a multiple of its type's block size
/// ("blk.0.ffn_down.weight: row length 96 is not a multiple of the Q4_K block size 256"),
/// an unsupported type, an unknown mix, version not 2/3, alignment not a power of two).
Status check_test_model_spec(const TestModelSpec& spec);

/// The model as an editable TestModel; fails as check_test_model_spec does.
Expected<TestModel> build_test_model(const TestModelSpec& spec);

/// All keys and tensors, not yet written. Precondition: check_test_model_spec(spec).ok()
/// (asserted); use build_test_model or write_test_model to get the error instead.
GgufWriter make_test_model(const TestModelSpec& spec);

/// Builds and writes the model to `path`. Errors: the spec's, or the writer's (names the path).
Status write_test_model(const TestModelSpec& spec, const std::string& path);

/// A fast random model for speed tests and shape checks: the keys, tensor names, shapes and
/// types of build_test_model(spec), but every matrix is random bytes generated while the file
/// is written (GgufWriter::add_tensor_generated), so a Llama-3-8B-shaped Q4_K_M file (~4.9 GB)
/// takes seconds and a few MiB of memory. Block scales are set so that each matrix's
/// dequantized weights average ~0 with standard deviation weight_scale / sqrt(n_in), as
/// build_test_model's do; 1-D tensors (norms ~1, biases, rope factors) are build_test_model's.
/// Reproducible (same spec, same bytes), but the matrices differ from build_test_model's.
/// Fails as check_test_model_spec does.
Expected<GgufWriter> make_fast_random_model(const TestModelSpec& spec);

/// make_fast_random_model(spec), written to `path` (streamed).
Status write_fast_random_model(const TestModelSpec& spec, const std::string& path);

/// The vocabulary a test model carries (n_vocab entries, all distinct): "<unk>", "<s>", "</s>",
/// "<0x00>".."<0xFF>", "▁", "a".."z", then common pieces ("▁t", "he", "▁the", ...) and
/// generated letter strings. Precondition: n_vocab >= 260.
std::vector<std::string> test_model_vocab(int64_t n_vocab);

/// A reproducible prompt of `n` (>= 1) token ids: BOS (1), then ids in [3, n_vocab) from a
/// linear congruential sequence started at `seed` (the same ids for the same arguments).
std::vector<int32_t> test_prompt(int64_t n, int64_t n_vocab, uint32_t seed);

/// Parses "F32", "Q4_K", "IQ4_XS", ... (the supported types, as type_name spells them);
/// std::nullopt otherwise.
std::optional<GgmlType> parse_test_model_type(const std::string& name);

/// A fresh directory under the system temp folder (mkdtemp), removed with its contents when
/// the object dies. Not copyable.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "spillway-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  /// path() + "/" + name.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace spw
