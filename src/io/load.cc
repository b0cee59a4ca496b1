// Loading: the wire-format scan that splits a model's bytes at ModelProto.graph (field 7),
// GraphProto.node (field 1) and GraphProto.initializer (field 5). Everything else is parsed by
// protobuf as usual; a big graph's nodes in two halves at once; each main-graph
// initializer becomes a header (the tensor without its data fields) plus the byte range of its
// field in the source, so that no weight is decoded or copied at load time.
#include "onnx_rewrite/model_io.h"

#include <climits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>

#include "onnx_rewrite/error.h"
#include "graph/two_threads.h"
#include "io/external_data.h"
#include "io/wire.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

// TensorProto fields that hold element values; an initializer header is the tensor without them.
bool is_tensor_payload(uint32_t field_number) {
  switch (field_number) {
    case 4:   // float_data
    case 5:   // int32_data
    case 6:   // string_data
    case 7:   // int64_data
    case 9:   // raw_data
    case 10:  // double_data
    case 11:  // uint64_data
      return true;
    default: return false;
  }
}

// Splits the graph field: initializers become headers whose payload stays in `source`, nodes
// are parsed apart (parse_graph), everything else is collected for a regular parse.
void scan_graph(const SourceBytes& source, const wire::Field& graph_field, std::string& graph_rest, std::vector<FileRange>& nodes,
                std::vector<std::pair<std::string, FileRange>>& initializers) {
  wire::FieldReader reader(source.data(), graph_field.payload_begin, graph_field.end);
  wire::Field field;
  while (reader.next(field)) {
    const char* bytes = reinterpret_cast<const char*>(source.data());
    if (field.number == wire::kGraphNode && field.type == wire::WireType::kLen) {
      nodes.push_back({field.begin, field.end});
      continue;
    }
    if (field.number != wire::kGraphInitializer || field.type != wire::WireType::kLen) {
      graph_rest.append(bytes + field.begin, field.size());
      continue;
    }
    std::string header;
    wire::FieldReader tensor_reader(source.data(), field.payload_begin, field.end);
    wire::Field tensor_field;
    while (tensor_reader.next(tensor_field)) {
      if (!is_tensor_payload(tensor_field.number)) header.append(bytes + tensor_field.begin, tensor_field.size());
    }
    initializers.emplace_back(std::move(header), FileRange{field.begin, field.end});
  }
}

// Protobuf parses messages nested at most 100 deep (as ONNX Runtime does): graphs inside nodes
// inside graphs reach that at about 33 levels of If/Loop bodies. Such a model is refused, named
// as what it is rather than as damage.
[[noreturn]] void refuse_unparsed(const std::string& name, bool too_deep) {
  constexpr int kDefaultLimit = 100;
  if (too_deep) {
    throw InputError(name, fmt::format("its messages nest deeper than the {} levels protobuf parses (subgraphs nested about {} "
                                       "deep), which ONNX Runtime refuses too",
                                       kDefaultLimit, kDefaultLimit / 3));
  }
  throw InputError(name, "not a valid ONNX model (protobuf parse failed)");
}

// Whether bytes that failed to parse parse with a deeper limit (the message is left cleared or
// half parsed).
bool parses_deeper(google::protobuf::Message& message, std::string_view bytes) {
  if (bytes.size() > INT_MAX) return false;
  google::protobuf::io::CodedInputStream deeper(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  deeper.SetRecursionLimit(1000);
  message.Clear();
  return message.ParsePartialFromCodedStream(&deeper) && deeper.ConsumedEntireMessage();
}

// Protobuf's parse of a flat buffer, which can't take 2 GiB or more (its limits are ints).
bool parse_bytes(google::protobuf::Message& message, std::string_view bytes) {
  return bytes.size() <= INT_MAX && message.ParsePartialFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void parse_part(google::protobuf::Message& message, const std::string& bytes, const std::string& name) {
  if (!parse_bytes(message, bytes)) refuse_unparsed(name, parses_deeper(message, bytes));
}

// The serialization of nodes [from, to) of `nodes`: where they lie side by side in the source, as
// exporters write them, the source's own bytes (a model's weights are often Constant nodes, which
// a copy would read and write once more); else a copy of them, in order.
class NodeBytes {
 public:
  NodeBytes(const SourceBytes& source, const std::vector<FileRange>& nodes, size_t from, size_t to) {
    if (from == to) return;
    const char* data = reinterpret_cast<const char*>(source.data());
    bool adjacent = true;
    for (size_t i = from + 1; i < to && adjacent; ++i) adjacent = nodes[i - 1].end == nodes[i].begin;
    if (adjacent) {
      in_source_ = {data + nodes[from].begin, nodes[to - 1].end - nodes[from].begin};
      return;
    }
    for (size_t i = from; i < to; ++i) copy_.append(data + nodes[i].begin, nodes[i].size());
  }
  std::string_view bytes() const { return copy_.empty() ? in_source_ : std::string_view(copy_); }

 private:
  std::string_view in_source_{"", 0};  // never a null pointer, even for no nodes
  std::string copy_;
};

// Parses the graph: its fields but the nodes (`rest`), then its node fields (`nodes`: where they
// lie in `source`, in order), which alone are a GraphProto's serialization, nested as the graph's
// own; a big graph's second half of nodes on another thread (parsing the nodes is most of loading
// one). A failure is named as one parse of the whole graph would name it: too deeply nested only
// if every part that failed parses with a deeper limit.
void parse_graph(onnx::GraphProto& graph, const std::string& rest, const SourceBytes& source, const std::vector<FileRange>& nodes,
                 const std::string& name) {
  const size_t half = nodes.size() >= kBigGraphNodes ? nodes.size() / 2 : nodes.size();
  const NodeBytes first_nodes(source, nodes, 0, half);
  const NodeBytes second_nodes(source, nodes, half, nodes.size());
  const std::string_view first_bytes = first_nodes.bytes();
  const std::string_view second_bytes = second_nodes.bytes();
  onnx::GraphProto first, second;
  bool rest_parsed = false, first_parsed = false, second_parsed = true;
  auto parse_first = [&] {
    rest_parsed = parse_bytes(graph, rest);
    first_parsed = parse_bytes(first, first_bytes);
  };
  if (second_bytes.empty()) {
    parse_first();
  } else {
    on_two_threads([&] { second_parsed = parse_bytes(second, second_bytes); }, parse_first);
  }
  if (!rest_parsed || !first_parsed || !second_parsed) {
    refuse_unparsed(name, (rest_parsed || parses_deeper(graph, rest)) && (first_parsed || parses_deeper(first, first_bytes)) &&
                              (second_parsed || parses_deeper(second, second_bytes)));
  }
  auto& list = *graph.mutable_node();
  list.Swap(first.mutable_node());
  auto& more = *second.mutable_node();
  std::vector<onnx::NodeProto*> taken(static_cast<size_t>(more.size()));
  more.ExtractSubrange(0, more.size(), taken.data());
  list.Reserve(list.size() + static_cast<int>(taken.size()));
  for (auto* node : taken) list.AddAllocated(node);
}

}  // namespace

// A friend of Model: the one place that records where headers' payloads lie.
Model parse_source(std::shared_ptr<const SourceBytes> source, const std::string& name) {
  Model model;
  model.source = source;
  std::string model_rest;
  std::string graph_rest;
  std::vector<FileRange> nodes;
  std::vector<std::pair<std::string, FileRange>> initializers;
  bool has_graph = false;
  try {
    wire::FieldReader reader(source->data(), 0, source->size());
    wire::Field field;
    while (reader.next(field)) {
      if (field.number == wire::kModelGraph && field.type == wire::WireType::kLen) {
        has_graph = true;
        scan_graph(*source, field, graph_rest, nodes, initializers);
      } else {
        model_rest.append(reinterpret_cast<const char*>(source->data()) + field.begin, field.size());
      }
    }
  } catch (const wire::MalformedError& e) {
    throw InputError(name, std::string("not a valid ONNX model (corrupt protobuf: ") + e.what() + ")");
  }
  // The model first: parsing clears a message, which would leave a graph parsed before it
  // present but unmarked (a copy of the model, or a serialization of it, would drop it).
  parse_part(model.proto, model_rest, name);
  auto* graph = model.proto.mutable_graph();
  parse_graph(*graph, graph_rest, *source, nodes, name);
  if (!has_graph) throw InputError(name, "not an ONNX model: it has no graph");
  if (!model.proto.has_ir_version() || model.proto.ir_version() <= 0) {
    throw InputError(name, "not an ONNX model: it has no ir_version");
  }
  graph->mutable_initializer()->Reserve(static_cast<int>(initializers.size()));
  for (auto& [header, range] : initializers) {
    auto* tensor = graph->add_initializer();
    if (!tensor->ParsePartialFromString(header)) {
      throw InputError(name, "not a valid ONNX model (an initializer does not parse)");
    }
    model.defer(*tensor, range);
  }
  // What is left to read are the payloads, when the output is written: on a big graph the
  // bytes just parsed would stay resident next to what was parsed from them.
  source->drop_pages();
  return model;
}

Model load_model(const fs::path& path, const LoadOptions& options) {
  Model model = parse_source(SourceBytes::map_file(path), path.string());
  model.path = path;
  model.missing_external_data = check_external_data(model, path.string(), options.allow_missing_external_data);
  return model;
}

Model reload_model(const Model& model) {
  Model fresh = parse_source(model.source, model.path.string());
  fresh.path = model.path;
  fresh.missing_external_data = model.missing_external_data;
  return fresh;
}

Model parse_model(const std::string& bytes, const std::string& name) {
  if (bytes.empty()) throw InputError(name, "empty, not an ONNX model");
  Model model = parse_source(SourceBytes::hold(bytes), name);
  model.path = name;
  refuse_external_data(model, name);
  return model;
}

}  // namespace onnx_rewrite
