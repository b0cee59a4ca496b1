#include "runtime/feeds.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/tensor.h"
#include "runtime/npy.h"

namespace onnx_rewrite {

namespace {

using onnx::TensorProto;

// splitmix64: small, and the same numbers on every machine and compiler (std::uniform_*
// distributions are not).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) on a grid of 2^-23, which float32 holds exactly.
  double symmetric() { return static_cast<double>(next() >> 40) / (1 << 23) - 1; }

 private:
  uint64_t state_;
};

// The tensor type of an input, looking through optional(tensor) (fed as the tensor); null for
// sequences, maps and the like.
const onnx::TypeProto_Tensor* tensor_type(const onnx::ValueInfoProto& input) {
  const auto& type = input.type();
  if (type.has_tensor_type()) return &type.tensor_type();
  if (type.has_optional_type() && type.optional_type().elem_type().has_tensor_type())
    return &type.optional_type().elem_type().tensor_type();
  return nullptr;
}

std::string dims_text(const google::protobuf::RepeatedField<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

std::string declared_text(const onnx::TensorShapeProto& shape) {
  std::vector<std::string> dims;
  for (const auto& dim : shape.dim()) {
    dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.has_dim_param() ? dim.dim_param() : "?");
  }
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Integers are drawn from [0, 8): ids and indices valid for any vocabulary or axis of 8 or more.
constexpr int64_t kIntegerLimit = 8;

// Inputs of ops that index a table by their values (whose size along the op's axis bounds them)
// or take a mask of 0 and 1 (table -1).
struct IndexUse {
  const char* domain;
  const char* op;
  int index;
  int table;
};
constexpr IndexUse kIndexUses[] = {
    {"", "Gather", 1, 0},
    {"com.microsoft", "EmbedLayerNormalization", 0, 2},   // input_ids: word_embedding
    {"com.microsoft", "EmbedLayerNormalization", 1, 4},   // segment_ids: segment_embedding
    {"com.microsoft", "EmbedLayerNormalization", 7, -1},  // mask
    {"com.microsoft", "Attention", 3, -1},                // mask_index, as a 0/1 mask
};

// A .pb's values in raw_data, as the drivers read them.
TensorProto with_raw_data(const TensorProto& tensor, const std::filesystem::path& file) {
  if (tensor.data_location() == TensorProto::EXTERNAL)
    throw InputError(file.string(), "a TensorProto with external data; give its values inline");
  if (tensor.has_raw_data()) return tensor;
  const auto values = decode_tensor(tensor);
  if (!values) throw InputError(file.string(), "a TensorProto whose values don't fit its type and dims");
  if (tensor.data_type() == TensorProto::INT64 || tensor.data_type() == TensorProto::UINT64) {
    TensorProto exact = make_int64_tensor(values->dims, values->integers);  // the same bytes for uint64
    exact.set_data_type(tensor.data_type());
    return exact;
  }
  return make_tensor(tensor.data_type(), values->dims, values->numbers);
}

TensorProto read_input_file(const std::filesystem::path& file) {
  if (file.extension() == ".npy") return read_npy(file);
  const std::string bytes = [&] {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string(), std::string("cannot read: ") + std::strerror(errno));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  TensorProto tensor;
  if (!tensor.ParseFromString(bytes)) throw InputError(file.string(), "not a TensorProto (.pb) nor a .npy file");
  if (tensor.data_type() == TensorProto::STRING) throw InputError(file.string(), "string tensors are not fed (numbers and bools only)");
  return with_raw_data(tensor, file);
}

TensorProto random_tensor(int32_t type, const std::vector<int64_t>& dims, int64_t limit, Random& random) {
  int64_t count = 1;
  for (int64_t dim : dims) count *= dim;
  std::vector<double> numbers(static_cast<size_t>(count));
  for (double& number : numbers) {
    switch (type) {
      case TensorProto::FLOAT:
      case TensorProto::DOUBLE:
      case TensorProto::FLOAT16:
      case TensorProto::BFLOAT16: number = random.symmetric(); break;
      case TensorProto::INT8: number = static_cast<double>(random.next() % 256) - 128; break;
      case TensorProto::UINT8: number = static_cast<double>(random.next() % 256); break;
      case TensorProto::BOOL: number = static_cast<double>(random.next() >> 63); break;
      default: number = static_cast<double>(random.next() % static_cast<uint64_t>(limit)); break;
    }
  }
  return make_tensor(type, dims, numbers);
}

bool fed_at_random(int32_t type) { return is_float_type(type) || is_integer_type(type); }

using Constants = std::map<std::string, const TensorProto*>;

// The bound `node` puts on the values of its input `value` (exclusive; 0: none).
int64_t limit_at(const onnx::NodeProto& node, const std::string& value, const Constants& constants) {
  const auto constant = [&](int index) -> const TensorProto* {
    auto found = node.input_size() > index ? constants.find(node.input(index)) : constants.end();
    return found == constants.end() ? nullptr : found->second;
  };
  for (const auto& use : kIndexUses) {
    if (node.domain() != use.domain || node.op_type() != use.op || node.input_size() <= use.index || node.input(use.index) != value)
      continue;
    if (use.table < 0) return 2;
    const TensorProto* table = constant(use.table);
    if (!table) continue;
    int64_t axis = 0;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "axis") axis = attribute.i();
    }
    if (axis < 0) axis += table->dims_size();
    if (axis >= 0 && axis < table->dims_size() && table->dims(static_cast<int>(axis)) > 0) return table->dims(static_cast<int>(axis));
  }
  // c - mask, c a scalar: a mask of 0 and 1, scaled next.
  const TensorProto* scalar = node.op_type() == "Sub" && node.domain().empty() && node.input(1) == value ? constant(0) : nullptr;
  if (scalar && (scalar->dims_size() == 0 || (scalar->dims_size() == 1 && scalar->dims(0) == 1))) return 2;
  return 0;
}

}  // namespace

ModelInterface interface_of(const onnx::GraphProto& graph) {
  Constants constants;  // initializers and Constant values: their dims are what is read
  for (const auto& tensor : graph.initializer()) constants.emplace(tensor.name(), &tensor);
  std::multimap<std::string, const onnx::NodeProto*> readers;
  for (const auto& node : graph.node()) {
    for (const auto& input : node.input()) readers.emplace(input, &node);
    if (node.op_type() == "Constant" && node.domain().empty() && node.output_size() == 1 && node.attribute_size() == 1 &&
        node.attribute(0).has_t()) {
      constants.emplace(node.output(0), &node.attribute(0).t());
    }
  }
  ModelInterface interface;
  for (const auto& input : graph.input()) {
    if (constants.count(input.name())) continue;
    interface.inputs.push_back(input);
    // Where the input's values go, through ops that keep them (casts and reshapes).
    std::vector<std::string> values{input.name()};
    for (size_t k = 0; k < values.size() && k < 16; ++k) {
      for (auto [at, end] = readers.equal_range(values[k]); at != end; ++at) {
        const onnx::NodeProto& node = *at->second;
        const std::string& op = node.op_type();
        if (node.domain().empty() &&
            (op == "Cast" || op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten" || op == "Identity")) {
          if (node.input(0) == values[k]) values.push_back(node.output(0));
          continue;
        }
        if (const int64_t limit = limit_at(node, values[k], constants)) {
          auto [bound, fresh] = interface.limits.emplace(input.name(), limit);
          if (!fresh) bound->second = std::min(bound->second, limit);
        }
      }
    }
  }
  interface.outputs.assign(graph.output().begin(), graph.output().end());
  return interface;
}

ModelInterface with_input_shapes(ModelInterface interface, const InputShapes& shapes, const std::string& model_name) {
  if (shapes.empty()) return interface;
  onnx::GraphProto declared;
  declared.mutable_input()->Add(interface.inputs.begin(), interface.inputs.end());
  declared.mutable_output()->Add(interface.outputs.begin(), interface.outputs.end());
  apply_input_shapes(declared, shapes, model_name);
  interface.inputs.assign(declared.input().begin(), declared.input().end());
  interface.outputs.assign(declared.output().begin(), declared.output().end());
  return interface;
}

std::vector<TensorProto> make_feeds(const ModelInterface& interface, const std::string& model_name, uint64_t seed,
                                    const std::map<std::string, std::filesystem::path>& files) {
  const auto fail = [&](const std::string& input, const std::string& why) -> UsageError {
    return UsageError(fmt::format("{}: input '{}': {}", model_name, input, why));
  };
  std::map<std::string, const onnx::ValueInfoProto*> inputs;
  for (const auto& input : interface.inputs) inputs.emplace(input.name(), &input);
  for (const auto& [name, file] : files) {
    if (inputs.count(name)) continue;
    std::vector<std::string> names;
    for (const auto& input : interface.inputs) names.push_back(input.name());
    throw UsageError(fmt::format("{}: --inputs {}={}: the model has no input of that name (inputs: {})", model_name, name, file.string(),
                                 fmt::join(names, ", ")));
  }

  // The user's files first: the sizes they give symbolic dims hold for the other inputs too.
  std::map<std::string, TensorProto> given;
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, file] : files) {
    TensorProto tensor = read_input_file(file);
    tensor.set_name(name);
    const onnx::TypeProto_Tensor* declared = tensor_type(*inputs.at(name));
    if (!declared) throw fail(name, "not a tensor, so it can't be fed");
    if (declared->elem_type() != tensor.data_type()) {
      throw fail(name, fmt::format("{} holds {} values, the model declares {}", file.string(), data_type_name(tensor.data_type()),
                                   data_type_name(declared->elem_type())));
    }
    if (declared->has_shape()) {
      const auto& shape = declared->shape();
      bool fits = shape.dim_size() == tensor.dims_size();
      for (int i = 0; fits && i < shape.dim_size(); ++i) {
        const auto& dim = shape.dim(i);
        if (dim.has_dim_value()) fits = dim.dim_value() == tensor.dims(i);
        else if (dim.has_dim_param() && !dim.dim_param().empty()) {
          auto [bound, fresh] = symbols.emplace(dim.dim_param(), tensor.dims(i));
          if (!fresh && bound->second != tensor.dims(i)) {
            throw fail(name, fmt::format("{} has {} = {}, another input's file {}", file.string(), dim.dim_param(), tensor.dims(i),
                                         bound->second));
          }
        }
      }
      if (!fits) {
        throw fail(name,
                   fmt::format("{} has shape {}, the model declares {}", file.string(), dims_text(tensor.dims()), declared_text(shape)));
      }
    }
    given.emplace(name, std::move(tensor));
  }

  Random random(seed);
  std::vector<TensorProto> feeds;
  for (const auto& input : interface.inputs) {
    if (auto found = given.find(input.name()); found != given.end()) {
      feeds.push_back(found->second);
      continue;
    }
    const onnx::TypeProto_Tensor* declared = tensor_type(input);
    if (!declared) throw fail(input.name(), "not a tensor: only tensors are fed");
    if (!fed_at_random(declared->elem_type())) {
      throw fail(input.name(), fmt::format("{} tensors are not generated; give its values with --inputs {}=FILE",
                                           data_type_name(declared->elem_type()), input.name()));
    }
    if (!declared->has_shape())
      throw fail(input.name(), fmt::format("its rank is unknown: give it with --input-shape {}=D0,D1,...", input.name()));
    std::vector<int64_t> dims;
    for (const auto& dim : declared->shape().dim()) {
      auto bound = dim.has_dim_param() ? symbols.find(dim.dim_param()) : symbols.end();
      dims.push_back(dim.has_dim_value() ? dim.dim_value() : bound != symbols.end() ? bound->second : kDefaultDim);
    }
    auto bound = interface.limits.find(input.name());
    const int64_t limit = bound == interface.limits.end() ? kIntegerLimit : std::min(kIntegerLimit, bound->second);
    TensorProto tensor = random_tensor(declared->elem_type(), dims, limit, random);
    tensor.set_name(input.name());
    feeds.push_back(std::move(tensor));
  }
  return feeds;
}

}  // namespace onnx_rewrite
