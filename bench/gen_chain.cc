// gen-chain: writes a long chain of small blocks, for measuring how the rewrite scales with the
// number of nodes (bench/scale_bench.sh). Each block is GELU spelled out as torch exports it
// (Div by √2, Erf, Add 1, Mul x, Mul ½: fuse-gelu-erf under --target ort) and a Relu; every
// tenth block ends in a mydomain::mygroupnorm call (the group-norm family, under every target).
// The constants are initializers shared by all blocks, so nearly all of the file is nodes.
//
// Two other shapes find steps whose cost grows with something other than the node count:
// --function-depth N, a chain of N model-local functions each calling the next (the inliner),
// and --fan-out N, one value read by N consumers (the matcher's consumer walk).

#include <onnx/onnx_pb.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

enum class Consumer { erf, gelu };

struct Config {
  int64_t nodes = 10000;
  int64_t function_depth = 0;
  int64_t fan_out = 0;
  Consumer consumer = Consumer::erf;
  int channels = 4;
  int groups = 2;
  std::filesystem::path out;
};

void add_float_initializer(onnx::GraphProto& graph, const std::string& name, const std::vector<int64_t>& dims,
                           const std::vector<float>& values) {
  onnx::TensorProto& tensor = *graph.add_initializer();
  tensor.set_name(name);
  tensor.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : dims) tensor.add_dims(dim);
  for (float value : values) tensor.add_float_data(value);
}

void add_tensor_info(onnx::ValueInfoProto& info, const std::string& name, int channels) {
  info.set_name(name);
  auto& tensor = *info.mutable_type()->mutable_tensor_type();
  tensor.set_elem_type(onnx::TensorProto::FLOAT);
  auto& shape = *tensor.mutable_shape();
  shape.add_dim()->set_dim_param("batch");
  shape.add_dim()->set_dim_value(channels);
  shape.add_dim()->set_dim_value(8);
  shape.add_dim()->set_dim_value(8);
}

// Appends nodes with one output each, "<name>_output_0" as torch names them.
class Chain {
 public:
  explicit Chain(onnx::GraphProto& graph) : graph_(graph) {}

  std::string add(const std::string& name, const std::string& op, std::vector<std::string> inputs,
                  const std::string& domain = "") {
    onnx::NodeProto& node = *graph_.add_node();
    node.set_name(name);
    node.set_op_type(op);
    if (!domain.empty()) node.set_domain(domain);
    for (auto& input : inputs) node.add_input(std::move(input));
    node.add_output(node.name() + "_output_0");
    return node.output(0);
  }

  onnx::NodeProto& last() { return *graph_.mutable_node(graph_.node_size() - 1); }
  int64_t size() const { return graph_.node_size(); }

 private:
  onnx::GraphProto& graph_;
};

void write_model(const onnx::ModelProto& model, const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  const bool written = model.SerializeToFileDescriptor(fd);
  if (::close(fd) != 0 || !written) throw std::runtime_error("writing " + path.string() + " failed");
}

void add_import(google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>& imports, const std::string& domain,
                int64_t version) {
  auto& import = *imports.Add();
  if (!domain.empty()) import.set_domain(domain);
  import.set_version(version);
}

// A torch-like model importing ai.onnx 17 (and `domain` 1, if given), its graph reading `input`.
onnx::ModelProto start_model(const Config& cfg, const std::string& domain) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("pytorch");
  model.set_producer_version("2.1.0");
  add_import(*model.mutable_opset_import(), "", 17);
  if (!domain.empty()) add_import(*model.mutable_opset_import(), domain, 1);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("main_graph");
  add_tensor_info(*graph.add_input(), "input", cfg.channels);
  return model;
}

// The constants add_gelu reads.
void add_gelu_constants(onnx::GraphProto& graph) {
  add_float_initializer(graph, "sqrt2", {}, {1.4142135381698608f});
  add_float_initializer(graph, "one", {}, {1.0f});
  add_float_initializer(graph, "half", {}, {0.5f});
}

// GELU spelled out as torch exports it, on x.
std::string add_gelu(Chain& chain, const std::string& scope, const std::string& x) {
  const std::string h = chain.add(scope + "/Div", "Div", {x, "sqrt2"});
  const std::string e = chain.add(scope + "/Erf", "Erf", {h});
  const std::string a = chain.add(scope + "/Add", "Add", {e, "one"});
  const std::string p = chain.add(scope + "/Mul", "Mul", {x, a});
  return chain.add(scope + "/Mul_1", "Mul", {p, "half"});
}

onnx::ModelProto generate_chain(const Config& cfg) {
  onnx::ModelProto model = start_model(cfg, "mydomain");
  onnx::GraphProto& graph = *model.mutable_graph();
  add_gelu_constants(graph);
  add_float_initializer(graph, "num_groups", {1}, {static_cast<float>(cfg.groups)});
  add_float_initializer(graph, "scale", {cfg.channels}, std::vector<float>(static_cast<size_t>(cfg.channels), 1.0f));
  add_float_initializer(graph, "bias", {cfg.channels}, std::vector<float>(static_cast<size_t>(cfg.channels), 0.0f));

  Chain chain(graph);
  std::string x = "input";
  for (int64_t block = 0; chain.size() < cfg.nodes; ++block) {
    const std::string scope = fmt::format("/block.{}", block);
    x = chain.add(scope + "/Relu", "Relu", {add_gelu(chain, scope, x)});
    if (block % 10 == 9) {
      x = chain.add(scope + "/mygroupnorm", "mygroupnorm", {x, "num_groups", "scale", "bias"}, "mydomain");
      auto& epsilon = *chain.last().add_attribute();
      epsilon.set_name("epsilon");
      epsilon.set_type(onnx::AttributeProto::FLOAT);
      epsilon.set_f(1e-5f);
    }
  }
  add_tensor_info(*graph.add_output(), x, cfg.channels);
  return model;
}

// Functions local.f0 ... local.f<depth-1>, as onnxscript writes nested modules: f<i> is a Relu
// and a call of f<i+1> (the last one: a Relu), each importing what its body uses; the main
// graph calls f0.
onnx::ModelProto generate_function_chain(const Config& cfg) {
  const std::string domain = "local";
  onnx::ModelProto model = start_model(cfg, domain);
  onnx::GraphProto& graph = *model.mutable_graph();
  Chain(graph).add("/f0", "f0", {"input"}, domain);
  add_tensor_info(*graph.add_output(), graph.node(0).output(0), cfg.channels);
  for (int64_t depth = 0; depth < cfg.function_depth; ++depth) {
    onnx::FunctionProto& function = *model.add_functions();
    function.set_name(fmt::format("f{}", depth));
    function.set_domain(domain);
    function.add_input("x");
    function.add_output("y");
    add_import(*function.mutable_opset_import(), "", 17);
    onnx::NodeProto& relu = *function.add_node();
    relu.set_name("Relu");
    relu.set_op_type("Relu");
    relu.add_input("x");
    relu.add_output(depth + 1 < cfg.function_depth ? "r" : "y");
    if (depth + 1 == cfg.function_depth) continue;
    add_import(*function.mutable_opset_import(), domain, 1);
    onnx::NodeProto& call = *function.add_node();
    call.set_name(fmt::format("f{}", depth + 1));
    call.set_op_type(call.name());
    call.set_domain(domain);
    call.add_input("r");
    call.add_output("y");
  }
  return model;
}

// `input` read by fan_out consumers: each a lone Erf, or the first node (Div) of a spelled-out
// GELU whose Mul reads `input` too (so the value has twice as many uses). The results are
// summed by a chain of Adds into the one output.
onnx::ModelProto generate_fan_out(const Config& cfg) {
  onnx::ModelProto model = start_model(cfg, "");
  onnx::GraphProto& graph = *model.mutable_graph();
  if (cfg.consumer == Consumer::gelu) add_gelu_constants(graph);
  Chain chain(graph);
  std::string sum;
  for (int64_t consumer = 0; consumer < cfg.fan_out; ++consumer) {
    const std::string scope = fmt::format("/branch.{}", consumer);
    const std::string y = cfg.consumer == Consumer::erf ? chain.add(scope + "/Erf", "Erf", {"input"})
                                                        : add_gelu(chain, scope, "input");
    sum = sum.empty() ? y : chain.add(scope + "/Add_sum", "Add", {sum, y});
  }
  add_tensor_info(*graph.add_output(), sum, cfg.channels);
  return model;
}

void generate(const Config& cfg) {
  const onnx::ModelProto model = cfg.function_depth > 0 ? generate_function_chain(cfg)
                                 : cfg.fan_out > 0      ? generate_fan_out(cfg)
                                                        : generate_chain(cfg);
  write_model(model, cfg.out);
  fmt::print("wrote {}: {} nodes, {} functions\n", cfg.out.string(), model.graph().node_size(), model.functions_size());
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Generate a chain of spelled-out GELU blocks with a custom group norm every tenth block."};
  auto* nodes = app.add_option("--nodes", cfg.nodes, "nodes to write (at least; whole blocks)")
                    ->capture_default_str()
                    ->check(CLI::PositiveNumber);
  auto* depth = app.add_option("--function-depth", cfg.function_depth,
                               "instead: a chain of this many model-local functions, each calling the next")
                    ->check(CLI::PositiveNumber)
                    ->excludes(nodes);
  auto* fan_out = app.add_option("--fan-out", cfg.fan_out, "instead: one value read by this many consumers")
                      ->check(CLI::PositiveNumber)
                      ->excludes(nodes)
                      ->excludes(depth);
  app.add_option("--consumer", cfg.consumer, "what each of --fan-out's consumers is: erf, or the Div of a spelled-out gelu")
      ->transform(CLI::CheckedTransformer(std::map<std::string, Consumer>{{"erf", Consumer::erf}, {"gelu", Consumer::gelu}}))
      ->needs(fan_out);
  app.add_option("--out", cfg.out, "model path")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    generate(cfg);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gen-chain: {}\n", e.what());
    return 1;
  }
}
