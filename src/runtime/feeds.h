// What a model is fed and fetched when it is verified: its interface, seeded random inputs, and
// the user's own (`--inputs NAME=FILE`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// The graph inputs a caller feeds (not those an initializer stands for) and the graph outputs.
struct ModelInterface {
  std::vector<onnx::ValueInfoProto> inputs;
  std::vector<onnx::ValueInfoProto> outputs;
  // Integer inputs whose values the graph bounds (exclusive), directly or through casts and
  // reshapes: the indices of a Gather (or of EmbedLayerNormalization) over a table of V rows stay
  // below V (BERT's token_type_ids: 2); a mask subtracted from a scalar (`(1 - mask) * lowest`, as
  // Hugging Face's exports scale attention masks: any other value overflows to infinity) or taken
  // by ONNX Runtime's Attention or EmbedLayerNormalization stays 0 or 1.
  std::map<std::string, int64_t> limits;
};
ModelInterface interface_of(const onnx::GraphProto& graph);
// The interface with --input-shape applied to its declarations (apply_input_shapes; throws
// UsageError as it does).
ModelInterface with_input_shapes(ModelInterface interface, const std::map<std::string, std::vector<int64_t>>& shapes,
                                 const std::string& model_name);

// A symbolic or unknown dim of an input nothing else sizes: long enough that a reduction or a
// broadcast over it still shows when it is wrong (an axis of 1 hides both).
inline constexpr int64_t kDefaultDim = 2;

// One tensor per input of `interface`, named as the input, its values in raw_data: the file
// `files` names for it (a .npy, or else a TensorProto .pb), or seeded random values (floats
// uniform in [-1, 1), int8 and uint8 over their whole range, other integers in [0, 8), bools 0 or
// 1; the same for a seed and an interface, whatever runs the models), below an input's limit. Random inputs take their
// dims from the declaration: a symbolic dim the size a file or another input gives it, else
// kDefaultDim, like an unknown one. Throws UsageError naming `model_name` and the input for what
// can't be fed (a string or non-tensor input without a file, a rank nothing gives, a file's type or
// shape other than declared, a file for no input), InputError for a file that can't be read.
std::vector<onnx::TensorProto> make_feeds(const ModelInterface& interface, const std::string& model_name, uint64_t seed,
                                          const std::map<std::string, std::filesystem::path>& files);

}  // namespace onnx_rewrite
