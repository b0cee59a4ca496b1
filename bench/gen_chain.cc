// gen-chain: writes a long chain of small blocks, for measuring how the rewrite scales with the
// number of nodes (bench/scale_bench.sh). Each block is GELU spelled out as torch exports it
// (Div by √2, Erf, Add 1, Mul x, Mul ½: fuse-gelu-erf under --target ort) and a Relu; every
// tenth block ends in a mydomain::mygroupnorm call (the group-norm family, under every target).
// The constants are initializers shared by all blocks, so nearly all of the file is nodes.

#include <onnx/onnx_pb.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Config {
  int64_t nodes = 10000;
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

void generate(const Config& cfg) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("pytorch");
  model.set_producer_version("2.1.0");
  model.add_opset_import()->set_version(17);
  auto& custom = *model.add_opset_import();
  custom.set_domain("mydomain");
  custom.set_version(1);

  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("main_graph");
  add_tensor_info(*graph.add_input(), "input", cfg.channels);
  add_float_initializer(graph, "sqrt2", {}, {1.4142135381698608f});
  add_float_initializer(graph, "one", {}, {1.0f});
  add_float_initializer(graph, "half", {}, {0.5f});
  add_float_initializer(graph, "num_groups", {1}, {static_cast<float>(cfg.groups)});
  add_float_initializer(graph, "scale", {cfg.channels}, std::vector<float>(static_cast<size_t>(cfg.channels), 1.0f));
  add_float_initializer(graph, "bias", {cfg.channels}, std::vector<float>(static_cast<size_t>(cfg.channels), 0.0f));

  Chain chain(graph);
  std::string x = "input";
  for (int64_t block = 0; chain.size() < cfg.nodes; ++block) {
    const std::string scope = fmt::format("/block.{}", block);
    const std::string h = chain.add(scope + "/Div", "Div", {x, "sqrt2"});
    const std::string e = chain.add(scope + "/Erf", "Erf", {h});
    const std::string a = chain.add(scope + "/Add", "Add", {e, "one"});
    const std::string p = chain.add(scope + "/Mul", "Mul", {x, a});
    const std::string g = chain.add(scope + "/Mul_1", "Mul", {p, "half"});
    x = chain.add(scope + "/Relu", "Relu", {g});
    if (block % 10 == 9) {
      x = chain.add(scope + "/mygroupnorm", "mygroupnorm", {x, "num_groups", "scale", "bias"}, "mydomain");
      auto& epsilon = *chain.last().add_attribute();
      epsilon.set_name("epsilon");
      epsilon.set_type(onnx::AttributeProto::FLOAT);
      epsilon.set_f(1e-5f);
    }
  }
  add_tensor_info(*graph.add_output(), x, cfg.channels);
  write_model(model, cfg.out);
  fmt::print("wrote {}: {} nodes\n", cfg.out.string(), graph.node_size());
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Generate a chain of spelled-out GELU blocks with a custom group norm every tenth block."};
  app.add_option("--nodes", cfg.nodes, "nodes to write (at least; whole blocks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
