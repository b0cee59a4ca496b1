// gen-bert: writes a BERT-like encoder laid out the way torch.onnx.export
// writes Hugging Face's BertModel (torch 2.x, opset 11..18), with seeded
// random weights, so benchmarks and tests get realistic models without
// downloading any.
//
// Fidelity notes (what a rewrite rule will see):
//  * node names follow torch's scope scheme ("/encoder/layer.0/attention/
//    self/query/MatMul", repeats get "_1", "_2", ...), outputs are
//    "<node name>_output_0";
//  * every scalar and small shape constant is a Constant node (torch's
//    choice), 0-d for scalars, 1-D int64 for axes/starts/shape pieces;
//    Unsqueeze axes are inputs (opset >= 13), and so are ReduceMean axes
//    from opset 18;
//  * Linear layers are MatMul with a pre-transposed "onnx::MatMul_N"
//    initializer followed by Add(bias, product), bias first as torch emits;
//  * LayerNorm is spelled out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
//    Div, Mul, Add) unless --layernorm fused; torch itself switches to
//    LayerNormalization from opset 17;
//  * reshapes take their shape from Shape/Gather/Unsqueeze/Concat, as
//    torch traces x.size();
//  * --legacy-export writes the older transformers 2.x / torch 1.x layout
//    that ONNX Runtime's Attention and EmbedLayerNormalization fusions
//    recognise (at opset 11 or 12): Linear as Add(MatMul, bias), position
//    ids from Range/Unsqueeze/Expand, word + position + token type
//    embeddings, the mask scaled by -10000, Softmax on axis 3.

#include <onnx/onnx_pb.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace {

enum class LayerNormStyle { spelled, fused };
enum class GeluStyle { erf, tanh };

struct Config {
  int layers = 12;
  int hidden = 768;
  int heads = 0;         // 0: hidden / 64, BERT's head size
  int intermediate = 0;  // 0: 4 * hidden, BERT's FFN ratio
  int vocab = 30522;
  int max_pos = 512;
  int type_vocab = 2;
  int opset = 14;
  uint64_t seed = 1;
  bool external_data = false;
  LayerNormStyle layernorm = LayerNormStyle::spelled;
  GeluStyle gelu = GeluStyle::erf;
  bool legacy = false;  // transformers 2.x / torch 1.x layout (see the file comment)
  std::filesystem::path out;

  int head_dim() const { return hidden / heads; }
};

// splitmix64: one multiply-xorshift round per value, deterministic per seed
// and fast enough to fill half a gigabyte of weights in well under a second.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Sum of four 16-bit uniforms (Irwin-Hall): bell-shaped, bounded at about
  // 3.5 std, and one draw per value. That is all the weights need: values in
  // BERT's range so the model computes finite, non-degenerate outputs.
  float normalish(float stddev) {
    const uint64_t r = next();
    const double sum = double(r & 0xffff) + double((r >> 16) & 0xffff) +
                       double((r >> 32) & 0xffff) + double(r >> 48);
    constexpr double kMean = 2 * 65535.0;
    const double kStd = 65536.0 / std::sqrt(3.0);
    return float((sum - kMean) / kStd * stddev);
  }

 private:
  uint64_t state_;
};

template <class T>
constexpr int32_t onnx_type();
template <>
constexpr int32_t onnx_type<float>() { return onnx::TensorProto::FLOAT; }
template <>
constexpr int32_t onnx_type<int64_t>() { return onnx::TensorProto::INT64; }

// Places initializers either inline (raw_data in the model, the only copy
// held in memory) or, with external data, straight into the side file so
// memory stays at one tensor no matter the model size.
class InitializerStore {
 public:
  // Tensors under 1 KiB stay inline, as with onnx's save_as_external_data;
  // tensors of 1 MiB or more start on a 4 KiB page so readers can mmap them.
  static constexpr size_t kExternalThreshold = 1024;
  static constexpr size_t kAlignThreshold = 1 << 20;
  static constexpr size_t kPageSize = 4096;

  InitializerStore(onnx::GraphProto& graph, const std::filesystem::path& data_path)
      : graph_(graph), data_location_(data_path.filename().string()) {
    if (!data_path.empty()) {
      data_file_.open(data_path, std::ios::binary | std::ios::trunc);
      if (!data_file_) throw std::runtime_error("cannot create " + data_path.string());
    }
  }

  // Adds initializer `name` and lets `fill` write its values.
  template <class T, class Fill>
  void add(const std::string& name, const std::vector<int64_t>& dims, Fill&& fill) {
    onnx::TensorProto& tensor = *graph_.add_initializer();
    tensor.set_name(name);
    tensor.set_data_type(onnx_type<T>());
    for (int64_t d : dims) tensor.add_dims(d);
    const size_t count = std::accumulate(dims.begin(), dims.end(), size_t{1},
                                         [](size_t a, int64_t d) { return a * size_t(d); });
    const size_t bytes = count * sizeof(T);
    total_bytes_ += bytes;

    if (!data_file_.is_open() || bytes < kExternalThreshold) {
      std::string& raw = *tensor.mutable_raw_data();
      raw.resize(bytes);
      fill(std::span<T>(reinterpret_cast<T*>(raw.data()), count));
      return;
    }
    buffer_.resize(bytes);
    fill(std::span<T>(reinterpret_cast<T*>(buffer_.data()), count));
    if (bytes >= kAlignThreshold) pad_to(kPageSize);
    tensor.set_data_location(onnx::TensorProto::EXTERNAL);
    add_entry(tensor, "location", data_location_);
    add_entry(tensor, "offset", std::to_string(data_offset_));
    add_entry(tensor, "length", std::to_string(bytes));
    data_file_.write(buffer_.data(), std::streamsize(bytes));
    data_offset_ += bytes;
  }

  void finish() {
    if (!data_file_.is_open()) return;
    data_file_.close();
    if (!data_file_) throw std::runtime_error("writing external data failed");
  }

  size_t total_bytes() const { return total_bytes_; }
  size_t data_file_bytes() const { return data_offset_; }

 private:
  static void add_entry(onnx::TensorProto& tensor, const std::string& key,
                        const std::string& value) {
    onnx::StringStringEntryProto& entry = *tensor.add_external_data();
    entry.set_key(key);
    entry.set_value(value);
  }

  void pad_to(size_t alignment) {
    const size_t padding = (alignment - data_offset_ % alignment) % alignment;
    static const char zeros[kPageSize] = {};
    data_file_.write(zeros, std::streamsize(padding));
    data_offset_ += padding;
  }

  onnx::GraphProto& graph_;
  std::string data_location_;
  std::ofstream data_file_;
  std::vector<char> buffer_;
  size_t data_offset_ = 0;
  size_t total_bytes_ = 0;
};

struct Attr {
  std::string name;
  std::variant<int64_t, float, std::vector<int64_t>> value;
};

// Appends nodes named the way torch names them: "<scope>/<Op>" and then
// "<scope>/<Op>_1", "_2", ... for further ops of that type in the scope.
class GraphBuilder {
 public:
  GraphBuilder(onnx::GraphProto& graph, int opset) : graph_(graph), opset_(opset) {}

  // Adds a node and returns the name of its (single) output.
  std::string op(const std::string& scope, const std::string& type,
                 const std::vector<std::string>& inputs, const std::vector<Attr>& attrs = {}) {
    return add_node(scope, type, inputs, attrs).output(0);
  }

  std::string scalar(const std::string& scope, float value) {
    onnx::TensorProto tensor;
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    tensor.add_float_data(value);
    return constant(scope, tensor);
  }

  std::string int_scalar(const std::string& scope, int64_t value) {
    onnx::TensorProto tensor;
    tensor.set_data_type(onnx::TensorProto::INT64);
    tensor.add_int64_data(value);
    return constant(scope, tensor);
  }

  std::string ints(const std::string& scope, const std::vector<int64_t>& values) {
    onnx::TensorProto tensor;
    tensor.set_data_type(onnx::TensorProto::INT64);
    tensor.add_dims(int64_t(values.size()));
    for (int64_t v : values) tensor.add_int64_data(v);
    return constant(scope, tensor);
  }

  // Unsqueeze's axes became an input in opset 13.
  std::string unsqueeze(const std::string& scope, const std::string& x, int64_t axis) {
    if (opset_ < 13) return op(scope, "Unsqueeze", {x}, {{"axes", std::vector<int64_t>{axis}}});
    return op(scope, "Unsqueeze", {x, ints(scope, {axis})});
  }

  int opset() const { return opset_; }

  // ReduceMean's axes moved from attribute to input in opset 18.
  std::string reduce_mean_last_axis(const std::string& scope, const std::string& x) {
    if (opset_ >= 18) return op(scope, "ReduceMean", {x, ints(scope, {-1})}, {{"keepdims", int64_t{1}}});
    return op(scope, "ReduceMean", {x}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
  }

  // x.size(axis) as torch traces it: Shape, then Gather with a 0-d index.
  std::string dim(const std::string& scope, const std::string& x, int64_t axis) {
    const std::string shape = op(scope, "Shape", {x});
    return op(scope, "Gather", {shape, int_scalar(scope, axis)}, {{"axis", int64_t{0}}});
  }

  // torch renames the value feeding a graph output to the output's name.
  void rename_last_output(const std::string& name) {
    graph_.mutable_node(graph_.node_size() - 1)->set_output(0, name);
  }

 private:
  std::string constant(const std::string& scope, const onnx::TensorProto& value) {
    onnx::NodeProto& node = add_node(scope, "Constant", {}, {});
    onnx::AttributeProto& attr = *node.add_attribute();
    attr.set_name("value");
    attr.set_type(onnx::AttributeProto::TENSOR);
    *attr.mutable_t() = value;
    return node.output(0);
  }

  onnx::NodeProto& add_node(const std::string& scope, const std::string& type,
                            const std::vector<std::string>& inputs, const std::vector<Attr>& attrs) {
    const std::string base = scope + "/" + type;
    const int seen = op_counts_[base]++;
    const std::string name = seen == 0 ? base : fmt::format("{}_{}", base, seen);

    onnx::NodeProto& node = *graph_.add_node();
    node.set_name(name);
    node.set_op_type(type);
    for (const std::string& input : inputs) node.add_input(input);
    node.add_output(name + "_output_0");
    for (const Attr& a : attrs) set_attribute(*node.add_attribute(), a);
    return node;
  }

  static void set_attribute(onnx::AttributeProto& proto, const Attr& attr) {
    proto.set_name(attr.name);
    if (const auto* i = std::get_if<int64_t>(&attr.value)) {
      proto.set_type(onnx::AttributeProto::INT);
      proto.set_i(*i);
    } else if (const auto* f = std::get_if<float>(&attr.value)) {
      proto.set_type(onnx::AttributeProto::FLOAT);
      proto.set_f(*f);
    } else {
      proto.set_type(onnx::AttributeProto::INTS);
      for (int64_t v : std::get<std::vector<int64_t>>(attr.value)) proto.add_ints(v);
    }
  }

  onnx::GraphProto& graph_;
  int opset_;
  std::map<std::string, int> op_counts_;
};

// Emits HF BertModel's forward pass, module by module, in torch's order.
class BertBuilder {
 public:
  BertBuilder(const Config& config, GraphBuilder& graph, InitializerStore& weights)
      : cfg_(config), g_(graph), w_(weights), rng_(config.seed) {}

  void build() {
    std::string hidden = embeddings();
    const std::string mask = extended_attention_mask();
    for (int i = 0; i < cfg_.layers; ++i) hidden = encoder_layer(i, hidden, mask);
    g_.rename_last_output("last_hidden_state");
  }

 private:
  static constexpr float kInitStd = 0.02f;  // BERT's initializer_range
  static constexpr float kLayerNormEps = 1e-12f;

  void random_weight(const std::string& name, const std::vector<int64_t>& dims) {
    w_.add<float>(name, dims, [this](std::span<float> v) {
      for (float& x : v) x = rng_.normalish(kInitStd);
    });
  }

  void constant_weight(const std::string& name, int64_t size, float value) {
    w_.add<float>(name, {size}, [value](std::span<float> v) { std::fill(v.begin(), v.end(), value); });
  }

  std::string embeddings() {
    const std::string scope = "/embeddings";
    const int64_t h = cfg_.hidden;
    random_weight("embeddings.word_embeddings.weight", {cfg_.vocab, h});
    random_weight("embeddings.position_embeddings.weight", {cfg_.max_pos, h});
    random_weight("embeddings.token_type_embeddings.weight", {cfg_.type_vocab, h});
    if (cfg_.legacy) return legacy_embeddings(scope);
    w_.add<int64_t>("embeddings.position_ids", {1, cfg_.max_pos},
                    [](std::span<int64_t> v) { std::iota(v.begin(), v.end(), int64_t{0}); });

    // position_ids = self.position_ids[:, 0:seq_length]
    const std::string seq_len = g_.dim(scope, "input_ids", 1);
    const std::string starts = g_.ints(scope, {0});
    const std::string ends = g_.unsqueeze(scope, seq_len, 0);
    const std::string axes = g_.ints(scope, {1});
    const std::string steps = g_.ints(scope, {1});
    const std::string position_ids =
        g_.op(scope, "Slice", {"embeddings.position_ids", starts, ends, axes, steps});

    const std::string words = g_.op(scope + "/word_embeddings", "Gather",
                                    {"embeddings.word_embeddings.weight", "input_ids"});
    const std::string types = g_.op(scope + "/token_type_embeddings", "Gather",
                                    {"embeddings.token_type_embeddings.weight", "token_type_ids"});
    std::string sum = g_.op(scope, "Add", {words, types});
    const std::string positions = g_.op(scope + "/position_embeddings", "Gather",
                                        {"embeddings.position_embeddings.weight", position_ids});
    sum = g_.op(scope, "Add", {sum, positions});
    return layer_norm(scope + "/LayerNorm", "embeddings.LayerNorm", sum);
  }

  // transformers 2.x: position_ids = torch.arange(seq_length).unsqueeze(0).expand(input_shape);
  // embeddings = inputs_embeds + position_embeddings + token_type_embeddings.
  std::string legacy_embeddings(const std::string& scope) {
    const std::string seq_len = g_.dim(scope, "input_ids", 1);
    const std::string range = g_.op(scope, "Range", {g_.int_scalar(scope, 0), seq_len, g_.int_scalar(scope, 1)});
    const std::string position_ids =
        g_.op(scope, "Expand", {g_.unsqueeze(scope, range, 0), g_.op(scope, "Shape", {"input_ids"})});
    const std::string words = g_.op(scope + "/word_embeddings", "Gather",
                                    {"embeddings.word_embeddings.weight", "input_ids"});
    const std::string positions = g_.op(scope + "/position_embeddings", "Gather",
                                        {"embeddings.position_embeddings.weight", position_ids});
    std::string sum = g_.op(scope, "Add", {words, positions});
    const std::string types = g_.op(scope + "/token_type_embeddings", "Gather",
                                    {"embeddings.token_type_embeddings.weight", "token_type_ids"});
    sum = g_.op(scope, "Add", {sum, types});
    return layer_norm(scope + "/LayerNorm", "embeddings.LayerNorm", sum);
  }

  // (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(float).min
  // (transformers 2.x: * -10000.0)
  std::string extended_attention_mask() {
    const std::string scope;  // torch puts BertModel's own ops at the root scope
    std::string mask = g_.unsqueeze(scope, "attention_mask", 1);
    mask = g_.unsqueeze(scope, mask, 2);
    mask = g_.op(scope, "Cast", {mask}, {{"to", int64_t{onnx::TensorProto::FLOAT}}});
    mask = g_.op(scope, "Sub", {g_.scalar(scope, 1.0f), mask});
    const float masked = cfg_.legacy ? -10000.0f : std::numeric_limits<float>::lowest();
    return g_.op(scope, "Mul", {mask, g_.scalar(scope, masked)});
  }

  std::string encoder_layer(int index, const std::string& x, const std::string& mask) {
    const std::string scope = fmt::format("/encoder/layer.{}", index);
    const std::string prefix = fmt::format("encoder.layer.{}", index);

    const std::string context = self_attention(scope + "/attention/self", prefix + ".attention.self", x, mask);
    std::string out = linear(scope + "/attention/output/dense", prefix + ".attention.output.dense",
                             context, cfg_.hidden, cfg_.hidden);
    out = g_.op(scope + "/attention/output", "Add", {out, x});
    const std::string attended = layer_norm(scope + "/attention/output/LayerNorm",
                                            prefix + ".attention.output.LayerNorm", out);

    std::string ffn = linear(scope + "/intermediate/dense", prefix + ".intermediate.dense", attended,
                             cfg_.hidden, cfg_.intermediate);
    ffn = gelu(scope + "/intermediate/intermediate_act_fn", ffn);
    ffn = linear(scope + "/output/dense", prefix + ".output.dense", ffn, cfg_.intermediate, cfg_.hidden);
    ffn = g_.op(scope + "/output", "Add", {ffn, attended});
    return layer_norm(scope + "/output/LayerNorm", prefix + ".output.LayerNorm", ffn);
  }

  std::string self_attention(const std::string& scope, const std::string& prefix, const std::string& x,
                             const std::string& mask) {
    const int h = cfg_.hidden;
    const std::string query = linear(scope + "/query", prefix + ".query", x, h, h);
    const std::string key = linear(scope + "/key", prefix + ".key", x, h, h);
    const std::string value = linear(scope + "/value", prefix + ".value", x, h, h);

    // HF transposes key, value, then query; torch folds key's permute
    // (0,2,1,3) and transpose(-1,-2) into one Transpose.
    const std::string key_t = g_.op(scope, "Transpose", {split_heads(scope, key)},
                                    {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
    const std::string value_h = g_.op(scope, "Transpose", {split_heads(scope, value)},
                                      {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    const std::string query_h = g_.op(scope, "Transpose", {split_heads(scope, query)},
                                      {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});

    std::string scores = g_.op(scope, "MatMul", {query_h, key_t});
    scores = g_.op(scope, "Div", {scores, g_.scalar(scope, std::sqrt(float(cfg_.head_dim())))});
    scores = g_.op(scope, "Add", {scores, mask});
    // torch's opset-9 symbolic writes softmax(dim=-1) with the dim counted from the front
    const int64_t softmax_axis = g_.opset() < 13 ? 3 : -1;
    const std::string probs = g_.op(scope, "Softmax", {scores}, {{"axis", softmax_axis}});

    std::string context = g_.op(scope, "MatMul", {probs, value_h});
    context = g_.op(scope, "Transpose", {context}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    // context.view(context.size()[:-2] + (all_head_size,))
    const std::string batch = g_.unsqueeze(scope, g_.dim(scope, context, 0), 0);
    const std::string seq = g_.unsqueeze(scope, g_.dim(scope, context, 1), 0);
    const std::string shape =
        g_.op(scope, "Concat", {batch, seq, g_.ints(scope, {cfg_.hidden})}, {{"axis", int64_t{0}}});
    return g_.op(scope, "Reshape", {context, shape});
  }

  // x.view(x.size()[:-1] + (num_heads, head_size))
  std::string split_heads(const std::string& scope, const std::string& x) {
    const std::string batch = g_.unsqueeze(scope, g_.dim(scope, x, 0), 0);
    const std::string seq = g_.unsqueeze(scope, g_.dim(scope, x, 1), 0);
    const std::string shape = g_.op(
        scope, "Concat", {batch, seq, g_.ints(scope, {cfg_.heads}), g_.ints(scope, {cfg_.head_dim()})},
        {{"axis", int64_t{0}}});
    return g_.op(scope, "Reshape", {x, shape});
  }

  // nn.Linear: torch exports the transposed weight as an anonymous
  // initializer and adds the bias first-operand (torch 1.x: second).
  std::string linear(const std::string& scope, const std::string& prefix, const std::string& x,
                     int64_t in, int64_t out) {
    const std::string weight = fmt::format("onnx::MatMul_{}", next_anonymous_id_++);
    random_weight(weight, {in, out});
    const std::string bias = prefix + ".bias";
    constant_weight(bias, out, 0.0f);
    const std::string product = g_.op(scope, "MatMul", {x, weight});
    if (cfg_.legacy) return g_.op(scope, "Add", {product, bias});
    return g_.op(scope, "Add", {bias, product});
  }

  std::string layer_norm(const std::string& scope, const std::string& prefix, const std::string& x) {
    const std::string gamma = prefix + ".weight";
    const std::string beta = prefix + ".bias";
    constant_weight(gamma, cfg_.hidden, 1.0f);
    constant_weight(beta, cfg_.hidden, 0.0f);
    if (cfg_.layernorm == LayerNormStyle::fused) {
      return g_.op(scope, "LayerNormalization", {x, gamma, beta},
                   {{"axis", int64_t{-1}}, {"epsilon", kLayerNormEps}});
    }
    const std::string mean = g_.reduce_mean_last_axis(scope, x);
    const std::string centered = g_.op(scope, "Sub", {x, mean});
    const std::string squared = g_.op(scope, "Pow", {centered, g_.scalar(scope, 2.0f)});
    const std::string variance = g_.reduce_mean_last_axis(scope, squared);
    const std::string shifted = g_.op(scope, "Add", {variance, g_.scalar(scope, kLayerNormEps)});
    const std::string stddev = g_.op(scope, "Sqrt", {shifted});
    const std::string normalized = g_.op(scope, "Div", {centered, stddev});
    const std::string scaled = g_.op(scope, "Mul", {normalized, gamma});
    return g_.op(scope, "Add", {scaled, beta});
  }

  std::string gelu(const std::string& scope, const std::string& x) {
    if (cfg_.gelu == GeluStyle::erf) {
      // torch's symbolic: x * (erf(x / sqrt(2)) + 1) * 0.5
      const std::string scaled = g_.op(scope, "Div", {x, g_.scalar(scope, std::numbers::sqrt2_v<float>)});
      const std::string erf = g_.op(scope, "Erf", {scaled});
      const std::string shifted = g_.op(scope, "Add", {erf, g_.scalar(scope, 1.0f)});
      const std::string product = g_.op(scope, "Mul", {x, shifted});
      return g_.op(scope, "Mul", {product, g_.scalar(scope, 0.5f)});
    }
    // HF NewGELUActivation, in Python evaluation order:
    // 0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3.0))))
    const std::string half_x = g_.op(scope, "Mul", {x, g_.scalar(scope, 0.5f)});
    const std::string cube = g_.op(scope, "Pow", {x, g_.scalar(scope, 3.0f)});
    const std::string cubic = g_.op(scope, "Mul", {cube, g_.scalar(scope, 0.044715f)});
    const std::string inner = g_.op(scope, "Add", {x, cubic});
    const std::string scaled = g_.op(scope, "Mul", {inner, g_.scalar(scope, float(std::sqrt(2.0 / std::numbers::pi)))});
    const std::string tanh = g_.op(scope, "Tanh", {scaled});
    const std::string shifted = g_.op(scope, "Add", {tanh, g_.scalar(scope, 1.0f)});
    return g_.op(scope, "Mul", {half_x, shifted});
  }

  const Config& cfg_;
  GraphBuilder& g_;
  InitializerStore& w_;
  Rng rng_;
  int next_anonymous_id_ = 0;
};

void add_value_info(onnx::ValueInfoProto& info, const std::string& name, int32_t elem_type,
                    const std::vector<std::variant<std::string, int64_t>>& dims) {
  info.set_name(name);
  onnx::TypeProto::Tensor& tensor = *info.mutable_type()->mutable_tensor_type();
  tensor.set_elem_type(elem_type);
  for (const auto& d : dims) {
    onnx::TensorShapeProto::Dimension& dim = *tensor.mutable_shape()->add_dim();
    if (const auto* param = std::get_if<std::string>(&d)) {
      dim.set_dim_param(*param);
    } else {
      dim.set_dim_value(std::get<int64_t>(d));
    }
  }
}

void write_model(const onnx::ModelProto& model, const std::filesystem::path& path) {
  if (model.ByteSizeLong() > size_t(std::numeric_limits<int32_t>::max())) {
    throw std::runtime_error("model exceeds protobuf's 2 GiB limit; use --external-data");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  // Streams through a small buffer: no second in-memory copy of the weights.
  const bool written = model.SerializeToFileDescriptor(fd);
  if (::close(fd) != 0 || !written) throw std::runtime_error("writing " + path.string() + " failed");
}

Config parse_args(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Generate a BERT-like encoder as torch.onnx.export writes it, with seeded random weights."};
  app.add_option("--layers", cfg.layers, "encoder layers")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", cfg.hidden, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", cfg.heads, "attention heads (default: hidden / 64)")->check(CLI::PositiveNumber);
  app.add_option("--intermediate", cfg.intermediate, "FFN size (default: 4 * hidden)")
      ->check(CLI::PositiveNumber);
  app.add_option("--vocab", cfg.vocab, "vocabulary size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-pos", cfg.max_pos, "maximum sequence length")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--opset", cfg.opset, "ai.onnx opset")->capture_default_str()->check(CLI::Range(11, 18));
  app.add_option("--seed", cfg.seed, "weight seed")->capture_default_str();
  app.add_flag("--external-data", cfg.external_data,
               "put initializers of 1 KiB or more in <out>.data next to the model");
  std::string layernorm = "spelled";
  std::string gelu = "erf";
  app.add_option("--layernorm", layernorm, "spelled: torch's opset<17 decomposition; fused: LayerNormalization")
      ->capture_default_str()
      ->check(CLI::IsMember({"spelled", "fused"}));
  app.add_option("--gelu", gelu, "erf: exact GELU; tanh: the tanh approximation, both spelled out")
      ->capture_default_str()
      ->check(CLI::IsMember({"erf", "tanh"}));
  app.add_flag("--legacy-export", cfg.legacy,
               "transformers 2.x / torch 1.x layout, which ONNX Runtime fuses into Attention and "
               "EmbedLayerNormalization at opset 11 or 12");
  app.add_option("--out", cfg.out, "model path")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }

  cfg.layernorm = layernorm == "fused" ? LayerNormStyle::fused : LayerNormStyle::spelled;
  cfg.gelu = gelu == "tanh" ? GeluStyle::tanh : GeluStyle::erf;
  if (cfg.heads == 0) cfg.heads = std::max(1, cfg.hidden / 64);
  if (cfg.intermediate == 0) cfg.intermediate = 4 * cfg.hidden;
  if (cfg.hidden % cfg.heads != 0) {
    throw std::runtime_error(fmt::format("--hidden {} is not divisible by --heads {}", cfg.hidden, cfg.heads));
  }
  if (cfg.layernorm == LayerNormStyle::fused && cfg.opset < 17) {
    throw std::runtime_error("--layernorm fused needs --opset 17 or later");
  }
  return cfg;
}

void generate(const Config& cfg) {
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("pytorch");
  model.set_producer_version("2.1.0");
  model.add_opset_import()->set_version(cfg.opset);

  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("main_graph");
  for (const char* input : {"input_ids", "attention_mask", "token_type_ids"}) {
    add_value_info(*graph.add_input(), input, onnx::TensorProto::INT64, {"batch", "sequence"});
  }
  add_value_info(*graph.add_output(), "last_hidden_state", onnx::TensorProto::FLOAT,
                 {"batch", "sequence", int64_t{cfg.hidden}});

  const std::filesystem::path data_path = cfg.external_data ? std::filesystem::path(cfg.out.string() + ".data")
                                                            : std::filesystem::path();
  InitializerStore weights(graph, data_path);
  GraphBuilder builder(graph, cfg.opset);
  BertBuilder(cfg, builder, weights).build();
  weights.finish();
  write_model(model, cfg.out);

  fmt::print("wrote {}: {} layers, {} nodes, {} initializers, {:.1f} MB of weights", cfg.out.string(), cfg.layers,
             graph.node_size(), graph.initializer_size(), double(weights.total_bytes()) / 1e6);
  if (cfg.external_data) {
    fmt::print(" ({} holds {:.1f} MB)", data_path.filename().string(), double(weights.data_file_bytes()) / 1e6);
  }
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Config cfg = parse_args(argc, argv);
    const auto start = std::chrono::steady_clock::now();
    generate(cfg);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    fmt::print("generated in {:.2f} s\n", elapsed.count());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gen-bert: {}\n", e.what());
    return 1;
  }
}
