// Model I/O: weights stay in the file until written, untouched bytes are kept exactly, external
// data is validated and carried along, writes are atomic.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include <google/protobuf/unknown_field_set.h>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/tensor.h"
#include "graph/two_threads.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// A model with a 1 MiB weight, a custom op the test rule rewrites, and everything a model can
// carry besides nodes.
onnx::ModelProto rich_model() {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1], producer_name: "exporter", producer_version: "9.9", metadata_props: ["author": "someone"]>
g (float[1, 262144] x) => (float[1, 262144] z) <float[1] tiny = {3.0}> {
  a = Mul (x, w)
  z = test.customop.CustomOpOne (a, tiny)
})");
  onnx::TensorProto weight = make_tensor(onnx::TensorProto::FLOAT, {1, 262144}, std::vector<double>(262144, 0.25));
  weight.set_name("w");
  weight.set_doc_string("the weight");
  *model.mutable_graph()->add_initializer() = weight;
  model.set_doc_string("model doc");
  model.mutable_graph()->set_doc_string("graph doc");
  auto* info = model.mutable_graph()->add_value_info();
  info->set_name("a");
  info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  // Fields newer than ONNX 1.12: ModelProto.configuration (26), GraphProto.metadata_props (16),
  // NodeProto.metadata_props (9), TensorProto.metadata_props (16).
  model.GetReflection()->MutableUnknownFields(&model)->AddLengthDelimited(26, "device-config");
  auto* graph = model.mutable_graph();
  graph->GetReflection()->MutableUnknownFields(graph)->AddLengthDelimited(16, "graph-meta");
  auto* node = graph->mutable_node(0);
  node->GetReflection()->MutableUnknownFields(node)->AddLengthDelimited(9, "node-meta");
  auto* tensor = graph->mutable_initializer(1);
  tensor->GetReflection()->MutableUnknownFields(tensor)->AddLengthDelimited(16, "tensor-meta");
  return model;
}

// The loader parses the graph apart from the rest of the model; the graph must still be part of
// the model (a copy of the proto, or its plain serialization, keeps it) even when no rule runs.
TEST(Loading, TheGraphIsPartOfTheModelAsLoaded) {
  const Model model = model_from_text(R"(
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) <float[2] w = {1.0, 2.0}> {
      y = Mul (x, w)
    })");
  EXPECT_TRUE(model.proto.has_graph());
  const onnx::ModelProto copy = model.proto;
  EXPECT_EQ(copy.graph().node_size(), 1);
  EXPECT_EQ(copy.graph().initializer_size(), 1);
}

TEST(Loading, WeightsStayInTheFileUntilSomethingNeedsThem) {
  TempDir dir;
  write_file(dir / "m.onnx", serialize(rich_model()));
  const Model model = load_model(dir / "m.onnx");
  const auto& weight = model.proto.graph().initializer(1);
  ASSERT_EQ(weight.name(), "w");
  EXPECT_FALSE(weight.has_raw_data()) << "the header carries no payload";
  EXPECT_EQ(weight.dims(1), 262144) << "but its name, type and dims";
  ASSERT_NE(model.deferred_field(weight), nullptr);
  const auto full = model.tensor_with_data(weight);
  EXPECT_EQ(full.raw_data().size(), 262144u * 4);
  EXPECT_EQ(decode_tensor(full)->numbers.back(), 0.25);
}

// The loader parses a graph in parts (its nodes apart, a big graph's in two halves at once): a
// model that fails to parse is named as one parse of it would name it. Too deeply nested only if
// nothing else is wrong with it; a corrupt node anywhere makes it "not valid".
std::string parse_error(const std::string& bytes) {
  try {
    parse_model(bytes, "m.onnx");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A model of `nodes` Relus whose value_info declares a sequence type nested `depth` deep, as bytes;
// `corrupt_node`: one more node field whose payload is no message (wire type 7).
std::string nested_model(int nodes, int depth, bool corrupt_node) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto& graph = *model.mutable_graph();
  graph.add_input()->set_name("v0");
  for (int i = 0; i < nodes; ++i) {
    auto& node = *graph.add_node();
    node.set_op_type("Relu");
    node.add_input("v" + std::to_string(i));
    node.add_output("v" + std::to_string(i + 1));
  }
  graph.add_output()->set_name("v" + std::to_string(nodes));
  onnx::TypeProto* type = graph.add_value_info()->mutable_type();
  graph.mutable_value_info(0)->set_name("v1");
  for (int level = 0; level < depth; ++level) type = type->mutable_sequence_type()->mutable_elem_type();
  type->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  std::string graph_bytes = graph.SerializeAsString();
  if (corrupt_node) graph_bytes += std::string("\x0a\x01\x0f", 3);  // GraphProto.node, 1 byte: a field of wire type 7
  model.clear_graph();
  std::string bytes = model.SerializeAsString();
  bytes += '\x3a';  // ModelProto.graph, length-delimited
  for (size_t length = graph_bytes.size();; length >>= 7) {
    if (length < 0x80) {
      bytes += static_cast<char>(length);
      break;
    }
    bytes += static_cast<char>((length & 0x7f) | 0x80);
  }
  return bytes + graph_bytes;
}

TEST(Loading, AFailureToParseIsNamedAsOneParseOfTheWholeModelWouldName) {
  for (const int nodes : {3, static_cast<int>(kBigGraphNodes) + 10'000}) {  // parsed in one piece, then in halves
    const std::string what = std::to_string(nodes) + " nodes";
    EXPECT_EQ(parse_error(nested_model(nodes, 10, false)), "") << what;
    EXPECT_NE(parse_error(nested_model(nodes, 60, false)).find("nest deeper than the 100 levels"), std::string::npos) << what;
    EXPECT_EQ(parse_error(nested_model(nodes, 10, true)), "not a valid ONNX model (protobuf parse failed)") << what;
    EXPECT_EQ(parse_error(nested_model(nodes, 60, true)), "not a valid ONNX model (protobuf parse failed)") << what;
  }
}

TEST(Writing, AnUnchangedModelIsWrittenBackByteForByte) {
  TempDir dir;
  const std::string bytes = serialize(rich_model());
  write_file(dir / "m.onnx", bytes);
  Model model = load_model(dir / "m.onnx");
  const auto result = rewrite_model(model, rules_from_text("", false), {});
  EXPECT_FALSE(result.changed());
  write_model(model, dir / "out.onnx");
  EXPECT_EQ(read_file(dir / "out.onnx"), bytes);
}

TEST(Writing, SplicingReproducesProtobufsOwnSerialization) {
  // Forcing the changed-model path on an unchanged model must give the same bytes: the weights
  // are spliced back exactly where a full serialization would put them.
  const std::string bytes = serialize(rich_model());
  Model model = parse_model(bytes, "m.onnx");
  model.changed = true;
  EXPECT_EQ(serialize_model(model), bytes);
}

TEST(Writing, ABigGraphWrittenOnASecondThreadIsWhatProtobufWouldWrite) {
  // 10,000 nodes more than a big graph has (the writer thread starts there), about 8 MB: the
  // nodes go out in chunks of 4 MB, the weights are spliced in after them.
  onnx::ModelProto proto = rich_model();
  auto* graph = proto.mutable_graph();
  for (int i = 0; i < static_cast<int>(kBigGraphNodes) + 10'000; ++i) {
    auto* node = graph->add_node();
    node->set_op_type("Relu");
    node->add_input(i == 0 ? "z" : "r" + std::to_string(i - 1));
    node->add_output("r" + std::to_string(i));
    node->set_doc_string(std::string(100, static_cast<char>('a' + i % 26)));
  }
  TempDir dir;
  const std::string bytes = serialize(proto);
  ASSERT_GT(bytes.size(), size_t{8} << 20);
  write_file(dir / "m.onnx", bytes);
  Model model = load_model(dir / "m.onnx");
  model.changed = true;
  write_model(model, dir / "out.onnx");
  EXPECT_EQ(read_file(dir / "out.onnx"), bytes);
  EXPECT_EQ(serialize_model(model), bytes);
}

// Packed weights are assembled from ranges of the source file without decoding them: read back
// (tensor_with_data), sized and written, they are the tensor a full serialization would hold,
// and the bytes come from the file (rows of 3 KiB gathered, a 64 KiB row copied whole).
TEST(Writing, AnAssembledTensorIsWrittenFromTheSourcesBytes) {
  for (const int64_t width : {3, 16384}) {
    SCOPED_TRACE(width);
    onnx::ModelProto proto = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 1] x) => (float[2, 1] y) {
  y = Identity (x)
})");
    std::vector<double> a_values, b_values;
    for (int64_t i = 0; i < 2 * width; ++i) a_values.push_back(static_cast<double>(i) + 0.5);
    for (int64_t i = 0; i < 4; ++i) b_values.push_back(-static_cast<double>(i) - 1);
    onnx::TensorProto a = make_tensor(onnx::TensorProto::FLOAT, {2, width}, a_values);
    a.set_name("a");
    onnx::TensorProto b = make_tensor(onnx::TensorProto::FLOAT, {2, 2}, b_values);
    b.set_name("b");
    *proto.mutable_graph()->add_initializer() = a;
    *proto.mutable_graph()->add_initializer() = b;
    TempDir dir;
    write_file(dir / "m.onnx", serialize(proto));
    Model model = load_model(dir / "m.onnx");
    const auto& graph = model.proto.graph();
    const auto a_raw = model.raw_data_in_source(graph.initializer(0));
    const auto b_raw = model.raw_data_in_source(graph.initializer(1));
    ASSERT_TRUE(a_raw && b_raw);
    const size_t a_row = static_cast<size_t>(width) * 4;
    ASSERT_EQ(a_raw->size(), 2 * a_row);
    // [a b] along axis 1: a's row 0, b's row 0, a's row 1, b's row 1.
    onnx::TensorProto& header = *model.proto.mutable_graph()->add_initializer();
    header.set_data_type(onnx::TensorProto::FLOAT);
    header.add_dims(2);
    header.add_dims(width + 2);
    header.set_name("packed");
    model.assemble(header, {{a_raw->begin, a_raw->begin + a_row}, {b_raw->begin, b_raw->begin + 8},
                            {a_raw->begin + a_row, a_raw->end}, {b_raw->begin + 8, b_raw->end}});
    model.changed = true;
    std::vector<double> expected;
    for (int64_t row = 0; row < 2; ++row) {
      expected.insert(expected.end(), a_values.begin() + row * width, a_values.begin() + (row + 1) * width);
      expected.insert(expected.end(), b_values.begin() + row * 2, b_values.begin() + (row + 1) * 2);
    }
    onnx::TensorProto full = make_tensor(onnx::TensorProto::FLOAT, {2, width + 2}, expected);
    full.set_name("packed");
    EXPECT_EQ(model.tensor_with_data(header).SerializeAsString(), full.SerializeAsString());
    EXPECT_EQ(model.tensor_size(header), full.ByteSizeLong());
    EXPECT_TRUE(model.payload_elsewhere(header));

    write_model(model, dir / "out.onnx");
    const onnx::ModelProto written = read_model(dir / "out.onnx");
    ASSERT_EQ(written.graph().initializer_size(), 3);
    EXPECT_EQ(written.graph().initializer(2).SerializeAsString(), full.SerializeAsString());
    EXPECT_EQ(written.graph().initializer(0).SerializeAsString(), a.SerializeAsString());
    EXPECT_EQ(serialize_model(model), read_file(dir / "out.onnx")) << "in memory as on disk";

    model.remove_initializers(*model.proto.mutable_graph(), [](const onnx::TensorProto& t) { return t.name() == "packed"; });
    EXPECT_EQ(model.proto.graph().initializer_size(), 2);
  }
}

TEST(Writing, ARewriteKeepsEverythingItDidNotMeanToTouch) {
  TempDir dir;
  const onnx::ModelProto original = rich_model();
  write_file(dir / "m.onnx", serialize(original));
  Model model = load_model(dir / "m.onnx");
  const auto result = rewrite_model(model, rules_from_text(kOneToAdd), {});
  ASSERT_EQ(result.rules.at("one").matches, 1);
  write_model(model, dir / "out.onnx");

  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "out.onnx")));
  EXPECT_EQ(written.graph().node(1).op_type(), "Add");
  // The weight: the very same bytes, unknown fields and doc string included.
  EXPECT_EQ(written.graph().initializer(1).SerializeAsString(), original.graph().initializer(1).SerializeAsString());
  EXPECT_EQ(written.graph().initializer(0).SerializeAsString(), original.graph().initializer(0).SerializeAsString());
  // Untouched node, with its unknown field.
  EXPECT_EQ(written.graph().node(0).SerializeAsString(), original.graph().node(0).SerializeAsString());
  // Model and graph level: doc strings, metadata, value_info, producer, unknown fields.
  EXPECT_EQ(written.doc_string(), "model doc");
  EXPECT_EQ(written.graph().doc_string(), "graph doc");
  EXPECT_EQ(written.producer_name(), "exporter");
  ASSERT_EQ(written.metadata_props_size(), 1);
  EXPECT_EQ(written.metadata_props(0).value(), "someone");
  ASSERT_EQ(written.graph().value_info_size(), 1);
  EXPECT_EQ(written.graph().value_info(0).name(), "a");
  EXPECT_EQ(written.unknown_fields().field(0).length_delimited(), "device-config");
  EXPECT_EQ(written.graph().unknown_fields().field(0).length_delimited(), "graph-meta");
  // Only the opset imports changed: the custom domain is gone.
  ASSERT_EQ(written.opset_import_size(), 1);
  EXPECT_EQ(written.opset_import(0).version(), 17);
}

TEST(Writing, ARemovedWeightIsGoneAndTheConstantThatReplacesItIsWrittenInFull) {
  // The weight's header is deleted and the new constant allocated right after: it may take the
  // header's address, and must not be mistaken for the weight still in the source file.
  TempDir dir;
  write_file(dir / "m.onnx", serialize(rich_model()));
  Model model = load_model(dir / "m.onnx");
  const auto result = rewrite_model(model, rules_from_text(R"(
rule add_half
  description: test
  targets: onnx
  pattern (x, w) => (a) { a = Mul (x, w) }
  replace (x, w) => (a) {
    half = Constant <value = float[1] {0.5}> ()
    a = Add (x, half)
  }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x, float[2] w) => (float[2] a) { a = Mul (x, w) }
  }
  expect {
    half = Constant <value = float[1] {0.5}> ()
    a = Add (x, half)
  }
end
)"), {});
  ASSERT_EQ(result.rules.at("add_half").matches, 1);
  write_model(model, dir / "out.onnx");

  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "out.onnx")));
  ASSERT_EQ(written.graph().initializer_size(), 2) << "tiny stays, w goes, the constant comes";
  EXPECT_EQ(written.graph().initializer(0).name(), "tiny");
  EXPECT_EQ(decode_tensor(written.graph().initializer(0))->numbers, std::vector<double>{3.0});
  const auto& constant = written.graph().initializer(1);
  EXPECT_EQ(constant.name(), written.graph().node(0).input(1));
  EXPECT_EQ(decode_tensor(constant)->numbers, std::vector<double>{0.5});
}

// ---- External data ----------------------------------------------------------------------------

// A model whose weight lives in `location` (relative to the model), at `offset` and `length`
// as written in the file (external data keeps them as text).
std::string external_model_text(const std::string& location, const std::string& offset, const std::string& length) {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] y) { y = Add (x, w) })");
  auto* weight = model.mutable_graph()->add_initializer();
  weight->set_name("w");
  weight->set_data_type(onnx::TensorProto::FLOAT);
  weight->add_dims(4);
  weight->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& key, const std::string& value) {
    auto* entry = weight->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", location);
  add("offset", offset);
  add("length", length);
  return serialize(model);
}

// The same with numbers; by default the weight is at offset 4096.
std::string external_model(const std::string& location, int64_t offset = 4096, int64_t length = 16) {
  return external_model_text(location, std::to_string(offset), std::to_string(length));
}

// `bytes` (a model from external_model) with its weight's header changed by `edit`.
std::string with_weight_header(const std::string& bytes, const std::function<void(onnx::TensorProto&)>& edit) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(bytes));
  edit(*model.mutable_graph()->mutable_initializer(0));
  return serialize(model);
}

void drop_length(onnx::TensorProto& weight) {
  auto* entries = weight.mutable_external_data();
  entries->erase(std::remove_if(entries->begin(), entries->end(), [](const auto& entry) { return entry.key() == "length"; }),
                 entries->end());
}

std::string load_error(const fs::path& path) {
  try {
    load_model(path);
  } catch (const InputError& e) {
    return e.file() + ": " + e.what();
  }
  return "";
}

TEST(ExternalData, IsCopiedNextToAModelWrittenElsewhereAndNeverReadOtherwise) {
  TempDir dir;
  fs::create_directories(dir / "in/weights");
  fs::create_directories(dir / "out");
  write_file(dir / "in/m.onnx", external_model("weights/w.bin"));
  const std::string data = std::string(4096, '\0') + std::string(16, 'x');
  write_file(dir / "in/weights/w.bin", data);
  Model model = load_model(dir / "in/m.onnx");
  write_model(model, dir / "out/m.onnx");
  EXPECT_EQ(read_file(dir / "out/weights/w.bin"), data);
  EXPECT_EQ(read_file(dir / "out/m.onnx"), read_file(dir / "in/m.onnx"));
  // Written next to the input: the data file is already there and stays as it is.
  write_model(model, dir / "in/copy.onnx");
  EXPECT_EQ(read_file(dir / "in/weights/w.bin"), data);
}

TEST(ExternalData, TheOutputIsNeverADataFileTheModelReads) {
  // The CLI's guard refuses it before any work; the library itself must not lose the weights for
  // a program that names such an output (the Python package's rewrite(path, output=...)).
  TempDir dir;
  fs::create_directories(dir / "in/weights");
  write_file(dir / "in/m.onnx", external_model("weights/w.bin"));
  const std::string data = std::string(4096, '\0') + std::string(16, 'x');
  write_file(dir / "in/weights/w.bin", data);
  Model model = load_model(dir / "in/m.onnx");
  fs::create_symlink("in/weights/w.bin", dir / "link.bin");
  for (const fs::path& output : {dir / "in/weights/w.bin", dir / "link.bin", dir / "in/weights/../weights/w.bin"}) {
    try {
      write_model(model, output);
      ADD_FAILURE() << output << " was written";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), output.string() + ": refusing to overwrite the external data file 'weights/w.bin' the model "
                                                         "reads its weights from");
    }
    EXPECT_EQ(read_file(dir / "in/weights/w.bin"), data);
  }
}

TEST(ExternalData, UnsafeOrMissingLocationsAreRefused) {
  TempDir dir;
  write_file(dir / "w.bin", std::string(8192, '\0'));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {external_model("/etc/passwd"), "location '/etc/passwd' is absolute or escapes the model's directory"},
      {external_model("../w.bin"), "location '../w.bin' is absolute or escapes the model's directory"},
      {external_model("a/../../w.bin"), "escapes the model's directory"},
      {external_model("missing.bin"), "file 'missing.bin' is missing"},
      {external_model("w.bin", 8190, 16), "lies outside 'w.bin' (8192 bytes)"},
  };
  for (const auto& [bytes, message] : cases) {
    write_file(dir / "m.onnx", bytes);
    const std::string error = load_error(dir / "m.onnx");
    EXPECT_EQ(error.rfind((dir / "m.onnx").string() + ": tensor 'w' (main graph): external data", 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
  write_file(dir / "m.onnx", external_model("w.bin"));
  EXPECT_EQ(load_error(dir / "m.onnx"), "");
}

TEST(ExternalData, ALocationWithANulByteIsRefusedAndPrintedReadably) {
  // open() would stop at the NUL and read w.bin: another file than the one the model names.
  TempDir dir;
  write_file(dir / "w.bin", std::string(8192, '\0'));
  for (const std::string tail : {"x", "/../../etc/passwd"}) {
    const std::string location = std::string("w.bin") + '\0' + tail;
    write_file(dir / "m.onnx", external_model(location));
    const std::string error = load_error(dir / "m.onnx");
    EXPECT_NE(error.find("location 'w.bin\\x00" + tail + "' holds a NUL byte"), std::string::npos) << error;
    EXPECT_EQ(error.find('\0'), std::string::npos) << "no raw NUL in the message";
  }
}

TEST(ExternalData, ALengthMustMatchTheTensorsTypeAndShape) {
  // ONNX Runtime refuses a length that disagrees with dims x element size; so do we, at load.
  TempDir dir;
  write_file(dir / "w.bin", std::string(8192, '\0'));
  write_file(dir / "m.onnx", external_model("w.bin", 4096, 12));
  EXPECT_NE(load_error(dir / "m.onnx").find("tensor 'w' (main graph): external data length 12 does not match the tensor: "
                                             "float[4] takes 16 bytes"),
            std::string::npos)
      << load_error(dir / "m.onnx");
  write_file(dir / "m.onnx", external_model("w.bin", 4096, 20));
  EXPECT_NE(load_error(dir / "m.onnx").find("length 20 does not match"), std::string::npos) << load_error(dir / "m.onnx");

  // Sub-byte types are packed, the last byte padded: int4[3] and uint2[5] take 2 bytes.
  for (const auto& [data_type, dims] : std::vector<std::pair<int32_t, std::vector<int64_t>>>{{22, {3}}, {25, {5}}}) {
    for (const int64_t length : {1, 2, 3}) {
      write_file(dir / "m.onnx", with_weight_header(external_model("w.bin", 0, length), [&](onnx::TensorProto& weight) {
                   weight.set_data_type(data_type);
                   weight.clear_dims();
                   for (const int64_t dim : dims) weight.add_dims(dim);
                 }));
      EXPECT_EQ(load_error(dir / "m.onnx").empty(), length == 2) << data_type << " " << length << ": " << load_error(dir / "m.onnx");
    }
  }
  // Strings have no fixed size: their length is not checked against the shape.
  write_file(dir / "m.onnx", with_weight_header(external_model("w.bin", 0, 3), [](onnx::TensorProto& weight) {
               weight.set_data_type(onnx::TensorProto::STRING);
             }));
  EXPECT_EQ(load_error(dir / "m.onnx"), "");
  // Shapes no file can hold.
  write_file(dir / "m.onnx", with_weight_header(external_model("w.bin"), [](onnx::TensorProto& weight) { weight.set_dims(0, -4); }));
  EXPECT_NE(load_error(dir / "m.onnx").find("the tensor float[-4] has a negative dimension"), std::string::npos)
      << load_error(dir / "m.onnx");
  write_file(dir / "m.onnx", with_weight_header(external_model("w.bin"), [](onnx::TensorProto& weight) {
               weight.set_dims(0, int64_t{1} << 40);
               weight.add_dims(int64_t{1} << 40);
             }));
  EXPECT_NE(load_error(dir / "m.onnx").find("is larger than any file"), std::string::npos) << load_error(dir / "m.onnx");
}

TEST(ExternalData, WithoutALengthTheTensorMustFitInTheFileFromItsOffset) {
  TempDir dir;
  write_file(dir / "m.onnx", with_weight_header(external_model("w.bin", 4096), drop_length));
  write_file(dir / "w.bin", std::string(4096 + 15, '\0'));
  EXPECT_NE(load_error(dir / "m.onnx").find("external data range [4096, +16) lies outside 'w.bin' (4111 bytes)"), std::string::npos)
      << load_error(dir / "m.onnx");
  write_file(dir / "w.bin", std::string(4096 + 16, '\0'));
  EXPECT_EQ(load_error(dir / "m.onnx"), "");
}

TEST(ExternalData, OffsetsAndLengthsMustBeExactByteCounts) {
  // Lenient number parsing would read "4096abc" as 4096 or "-1" as a huge size.
  TempDir dir;
  write_file(dir / "w.bin", std::string(8192, '\0'));
  for (const auto& [offset, length] : std::vector<std::pair<std::string, std::string>>{
           {"4096abc", "16"}, {"-1", "16"}, {"", "16"}, {" 4096", "16"}, {"0", "99999999999999999999"}, {"0", "0x10"}}) {
    write_file(dir / "m.onnx", external_model_text("w.bin", offset, length));
    const std::string bad = offset == "0" ? length : offset;
    const std::string key = offset == "0" ? "length" : "offset";
    EXPECT_NE(load_error(dir / "m.onnx").find(key + " '" + bad + "' is not a byte count"), std::string::npos)
        << load_error(dir / "m.onnx");
  }
}

TEST(ExternalData, SymbolicLinksOutOfTheModelsDirectoryAreRefused) {
  TempDir dir;
  fs::create_directories(dir / "model");
  fs::create_directories(dir / "secret");
  write_file(dir / "secret/w.bin", std::string(8192, 's'));
  fs::create_symlink(dir / "secret/w.bin", dir / "model/w.bin");
  fs::create_directory_symlink(dir / "secret", dir / "model/linked");
  for (const std::string location : {"w.bin", "linked/w.bin"}) {
    write_file(dir / "model/m.onnx", external_model(location));
    EXPECT_NE(load_error(dir / "model/m.onnx")
                  .find("location '" + location + "' leads outside the model's directory through a symbolic link"),
              std::string::npos)
        << load_error(dir / "model/m.onnx");
  }
  // A link that stays inside the directory is fine.
  fs::create_directories(dir / "model/data");
  write_file(dir / "model/data/real.bin", std::string(8192, 'r'));
  fs::create_symlink("data/real.bin", dir / "model/inside.bin");
  write_file(dir / "model/m.onnx", external_model("inside.bin"));
  EXPECT_EQ(load_error(dir / "model/m.onnx"), "");
}

TEST(ExternalData, NeverReplacesADifferentDataFileAtTheDestination) {
  // Two models in different folders, each with its own weights.bin, written to one folder:
  // the second must not silently swap the first model's weights.
  TempDir dir;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  fs::create_directories(dir / "out");
  write_file(dir / "a/m.onnx", external_model("weights.bin"));
  write_file(dir / "b/m.onnx", external_model("weights.bin"));
  write_file(dir / "a/weights.bin", std::string(8192, 'a'));
  write_file(dir / "b/weights.bin", std::string(8192, 'b'));
  Model first = load_model(dir / "a/m.onnx");
  write_model(first, dir / "out/first.onnx");
  Model second = load_model(dir / "b/m.onnx");
  try {
    write_model(second, dir / "out/second.onnx");
    ADD_FAILURE() << "expected a refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("external data 'weights.bin' would replace a different file already in"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(dir / "out/weights.bin"), std::string(8192, 'a'));
  EXPECT_FALSE(fs::exists(dir / "out/second.onnx"));
  // The same bytes under the same name are simply shared.
  write_file(dir / "b/weights.bin", std::string(8192, 'a'));
  Model same = load_model(dir / "b/m.onnx");
  write_model(same, dir / "out/second.onnx");
  EXPECT_TRUE(fs::exists(dir / "out/second.onnx"));
}

TEST(ExternalData, AModelLinkedFromASnapshotMayHaveDataLinksIntoTheDirectoryItsLinkLeadsTo) {
  // A Hugging Face cache: snap/model.onnx -> ../blobs/HASH, snap/w.bin -> ../blobs/HASH2. The
  // weights are found beside the link (where runtimes look) and may lead where the model does.
  TempDir dir;
  fs::create_directories(dir / "hub/blobs");
  fs::create_directories(dir / "hub/snap");
  fs::create_directories(dir / "secret");
  write_file(dir / "hub/blobs/1f0e", external_model("w.bin"));
  write_file(dir / "hub/blobs/9a7c", std::string(8192, 'w'));
  write_file(dir / "secret/s.bin", std::string(8192, 's'));
  fs::create_symlink("../blobs/1f0e", dir / "hub/snap/m.onnx");
  fs::create_symlink("../blobs/9a7c", dir / "hub/snap/w.bin");
  EXPECT_EQ(load_error(dir / "hub/snap/m.onnx"), "");
  fs::create_directories(dir / "out");
  write_model(load_model(dir / "hub/snap/m.onnx"), dir / "out/m.onnx");
  EXPECT_FALSE(fs::is_symlink(dir / "out/w.bin"));
  EXPECT_EQ(read_file(dir / "out/w.bin"), std::string(8192, 'w'));
  // Elsewhere is still out of bounds, and so are the blobs for a model that is no link.
  fs::remove(dir / "hub/snap/w.bin");
  fs::create_symlink("../../secret/s.bin", dir / "hub/snap/w.bin");
  EXPECT_NE(load_error(dir / "hub/snap/m.onnx").find("leads outside the model's directory through a symbolic link"), std::string::npos)
      << load_error(dir / "hub/snap/m.onnx");
  fs::remove(dir / "hub/snap/w.bin");
  fs::remove(dir / "hub/snap/m.onnx");
  fs::create_symlink("../blobs/9a7c", dir / "hub/snap/w.bin");
  fs::copy_file(dir / "hub/blobs/1f0e", dir / "hub/snap/m.onnx");
  EXPECT_NE(load_error(dir / "hub/snap/m.onnx").find("leads outside the model's directory through a symbolic link"), std::string::npos)
      << load_error(dir / "hub/snap/m.onnx");
}

// A model with two weights, in `first` and `second`, 16 bytes each at offset 0.
std::string two_file_model(const std::string& first, const std::string& second) {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] y) { t = Add (x, v) y = Add (t, w) })");
  for (const auto& [name, location] : {std::pair{"v", first}, {"w", second}}) {
    auto* weight = model.mutable_graph()->add_initializer();
    weight->set_name(name);
    weight->set_data_type(onnx::TensorProto::FLOAT);
    weight->add_dims(4);
    weight->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", location}, {"offset", "0"}, {"length", "16"}}) {
      auto* entry = weight->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
  return serialize(model);
}

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ExternalData, ADataFileThatAppearsBeforeTheCommitIsComparedNeverReplaced) {
  // What another process may do between preparing a model and committing it.
  TempDir dir;
  fs::create_directories(dir / "in");
  fs::create_directories(dir / "out");
  write_file(dir / "in/m.onnx", two_file_model("a.bin", "b.bin"));
  write_file(dir / "in/a.bin", std::string(16, 'a'));
  write_file(dir / "in/b.bin", std::string(16, 'b'));
  const Model model = load_model(dir / "in/m.onnx");
  {
    PendingModel pending(model, dir / "out/m.onnx");
    write_file(dir / "out/b.bin", std::string(16, 'X'));
    try {
      pending.commit();
      ADD_FAILURE() << "expected a refusal";
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), (dir / "out/m.onnx").string());
      EXPECT_EQ(std::string(e.what()), "external data 'b.bin' would replace a different file already in " + (dir / "out").string());
    }
  }
  EXPECT_EQ(names_in(dir / "out"), std::vector<std::string>{"b.bin"}) << "a.bin, placed first, is taken back";
  EXPECT_EQ(read_file(dir / "out/b.bin"), std::string(16, 'X'));
  // The same bytes are simply shared.
  write_file(dir / "out/b.bin", std::string(16, 'b'));
  {
    PendingModel pending(model, dir / "out/m.onnx");
    fs::remove(dir / "out/b.bin");
    write_file(dir / "out/b.bin", std::string(16, 'b'));  // another file, the same bytes
    pending.commit();
  }
  EXPECT_EQ(names_in(dir / "out"), (std::vector<std::string>{"a.bin", "b.bin", "m.onnx"}));
}

TEST(AtomicWrite, APendingModelShowsNothingUntilCommitted) {
  TempDir dir;
  fs::create_directories(dir / "in");
  fs::create_directories(dir / "out");
  write_file(dir / "in/m.onnx", two_file_model("a.bin", "sub/b.bin"));
  write_file(dir / "in/a.bin", std::string(16, 'a'));
  fs::create_directories(dir / "in/sub");
  write_file(dir / "in/sub/b.bin", std::string(16, 'b'));
  const Model model = load_model(dir / "in/m.onnx");
  {
    PendingModel pending(model, dir / "out/m.onnx");
    for (const auto& name : names_in(dir / "out")) EXPECT_TRUE(name == "sub" || name.rfind(".", 0) == 0) << name;
  }
  EXPECT_EQ(names_in(dir / "out"), std::vector<std::string>{"sub"}) << "only the (empty) directory made for the data";
  EXPECT_TRUE(fs::is_empty(dir / "out/sub"));
  PendingModel pending(model, dir / "out/m.onnx");
  pending.commit();
  EXPECT_EQ(names_in(dir / "out"), (std::vector<std::string>{"a.bin", "m.onnx", "sub"}));
  EXPECT_EQ(read_file(dir / "out/sub/b.bin"), std::string(16, 'b'));
}

TEST(AtomicWrite, AModelBeingWrittenHasNoNameWhereTheFileSystemAllows) {
  // Nothing for an interrupted or killed run to leave behind (O_TMPFILE, linked in at commit).
  TempDir dir;
  const int probe = ::open(dir.path().c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (probe >= 0) ::close(probe);
  if (probe < 0 || ::access("/proc/self/fd", X_OK) != 0) GTEST_SKIP() << "no unnamed files here, or no /proc to link them by";
  write_file(dir / "m.onnx", serialize(rich_model()));
  Model model = load_model(dir / "m.onnx");
  model.changed = true;
  fs::create_directories(dir / "out");
  for (int round = 0; round < 2; ++round) {  // a new file, then one replaced
    {
      PendingModel pending(model, dir / "out/m.onnx");
      EXPECT_EQ(names_in(dir / "out"), round == 0 ? std::vector<std::string>{} : std::vector<std::string>{"m.onnx"});
      pending.commit();
    }
    EXPECT_EQ(names_in(dir / "out"), std::vector<std::string>{"m.onnx"});
    EXPECT_EQ(read_file(dir / "out/m.onnx"), serialize_model(model));
    // A new file gets the default permissions; one replaced keeps its own.
    const auto permissions = fs::status(dir / "out/m.onnx").permissions();
    if (round == 0) {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      EXPECT_EQ(static_cast<mode_t>(permissions), 0666 & ~mask);
      fs::permissions(dir / "out/m.onnx", fs::perms(0640));
    } else {
      EXPECT_EQ(permissions, fs::perms(0640));
    }
  }
}

// Why tests/support/no_unnamed_files.cc can't be preloaded into the tool here; empty if it can.
std::string why_not_preloaded() {
#if defined(__SANITIZE_ADDRESS__)
  return "GCC's sanitizer runtime must come first in the library list";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return "not tried with clang's sanitizer runtime and a preloaded library";
#endif
#endif
  if (::access("/proc/self/fd", X_OK) != 0) return "no /proc: the tool never asks for an unnamed file here";
  return "";
}

// Runs the tool with tests/support/no_unnamed_files.cc preloaded, `settings` (NAME=value) added
// to its environment; what it did is logged to `log`, emptied first.
CommandResult without_unnamed_files(const fs::path& log, const std::vector<std::string>& settings, const std::vector<std::string>& args) {
  fs::remove(log);
  std::vector<std::string> argv{"env", std::string("LD_PRELOAD=") + NO_UNNAMED_FILES_LIBRARY, "NO_UNNAMED_FILES_LOG=" + log.string()};
  argv.insert(argv.end(), settings.begin(), settings.end());
  argv.push_back(cli_path().string());
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

// How often the preloaded library logged `event` ('x' an unnamed file refused, 'r' a no-replace
// rename refused, 'l' a link() made or tried, 't' a target taken).
size_t logged(const fs::path& log, char event) {
  if (!fs::exists(log)) return 0;
  const std::string events = read_file(log);
  return static_cast<size_t>(std::count(events.begin(), events.end(), event));
}

// A default mode that differs from mkstemp's 0600, for the duration of a test.
struct Umask022 {
  mode_t old = ::umask(022);
  ~Umask022() { ::umask(old); }
};

// Writes dir/in/m.onnx, its weights in data files written only where absent (a.bin with mode
// 0640, which a copy keeps: neither the default nor mkstemp's 0600; sub/b.bin), and returns what
// a plain run of the tool writes for it.
std::string two_file_input(const TempDir& dir) {
  fs::create_directories(dir / "in/sub");
  write_file(dir / "in/m.onnx", two_file_model("a.bin", "sub/b.bin"));
  write_file(dir / "in/a.bin", std::string(16, 'a'));
  fs::permissions(dir / "in/a.bin", fs::perms(0640));
  write_file(dir / "in/sub/b.bin", std::string(16, 'b'));
  fs::create_directories(dir / "plain");
  const auto plain = run_cli({"rewrite", (dir / "in/m.onnx").string(), "-o", (dir / "plain/m.onnx").string(), "--target", "ort"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  return read_file(dir / "plain/m.onnx");
}

TEST(AtomicWrite, WithoutUnnamedFilesNamedTemporaryOnesDoTheSameAndLeaveNothing) {
  // A file system without O_TMPFILE (or no /proc): each output is a hidden temporary file until
  // committed. Run the tool with open() refusing O_TMPFILE, against a plain run.
  if (const std::string why = why_not_preloaded(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const Umask022 umask_022;
  const std::string expected = two_file_input(dir);
  ASSERT_FALSE(HasFailure()) << "the plain run";
  for (const char* out : {"named", "batch"}) fs::create_directories(dir / out);
  const std::string input = (dir / "in/m.onnx").string();
  const fs::path log = dir / "log";

  for (int round = 0; round < 2; ++round) {  // a new file and its data files, then the file replaced
    const auto named = without_unnamed_files(log, {}, {"rewrite", input, "-o", (dir / "named/m.onnx").string(), "--target", "ort"});
    ASSERT_EQ(named.exit_code, 0) << named.err;
    EXPECT_EQ(logged(log, 'x'), round == 0 ? 3u : 1u) << "every file written, named (the data files are there the second time)";
    EXPECT_EQ(read_file(dir / "named/m.onnx"), expected);
    EXPECT_EQ(names_in(dir / "named"), (std::vector<std::string>{"a.bin", "m.onnx", "sub"})) << "a temporary file left behind";
    EXPECT_EQ(names_in(dir / "named/sub"), std::vector<std::string>{"b.bin"});
    EXPECT_EQ(read_file(dir / "named/sub/b.bin"), std::string(16, 'b'));
    EXPECT_EQ(fs::status(dir / "named/a.bin").permissions(), fs::perms(0640));
    const auto permissions = fs::status(dir / "named/m.onnx").permissions();
    if (round == 0) {
      EXPECT_EQ(permissions, fs::perms(0644)) << "a new file: the default permissions";
      fs::permissions(dir / "named/m.onnx", fs::perms(0640));
    } else {
      EXPECT_EQ(permissions, fs::perms(0640)) << "a replaced file keeps its own";
    }
  }
  // Two models sharing their data files, on two workers.
  fs::copy_file(dir / "in/m.onnx", dir / "in/m2.onnx");
  const auto batch = without_unnamed_files(log, {}, {"batch", (dir / "in").string(), "-o", (dir / "batch").string(), "-j", "2", "--target", "ort"});
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  EXPECT_GE(logged(log, 'x'), 4u) << "both models, and each data file at least once (the other worker may reuse it)";
  EXPECT_EQ(read_file(dir / "batch/m.onnx"), expected);
  EXPECT_EQ(read_file(dir / "batch/m2.onnx"), expected);
  EXPECT_EQ(names_in(dir / "batch"), (std::vector<std::string>{"a.bin", "m.onnx", "m2.onnx", "sub"}));
  EXPECT_EQ(names_in(dir / "batch/sub"), std::vector<std::string>{"b.bin"});
  EXPECT_EQ(read_file(dir / "batch/a.bin"), std::string(16, 'a'));
}

TEST(ExternalData, ANamedDataFileRacedForIsComparedNeverReplacedWithOrWithoutNoReplaceRenames) {
  // Named temporary files, moved in with renameat2(RENAME_NOREPLACE) or, where a file system
  // lacks it (NFS), with link(); and another process putting a file of the same name there just
  // before the move.
  if (const std::string why = why_not_preloaded(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string expected = two_file_input(dir);
  ASSERT_FALSE(HasFailure()) << "the plain run";
  fs::create_directories(dir / "same");  // what the other process writes (with mode 0604): the same bytes
  write_file(dir / "same/a.bin", std::string(16, 'a'));
  write_file(dir / "same/b.bin", std::string(16, 'b'));
  fs::create_directories(dir / "other");  // or others, for one file
  write_file(dir / "other/b.bin", std::string(16, 'X'));
  const std::string input = (dir / "in/m.onnx").string();
  const fs::path log = dir / "log";

  for (const bool no_replace : {true, false}) {
    SCOPED_TRACE(no_replace ? "renameat2(RENAME_NOREPLACE)" : "link()");
    const std::vector<std::string> lacking = no_replace ? std::vector<std::string>{} : std::vector<std::string>{"NO_UNNAMED_FILES_NO_NOREPLACE=1"};
    const auto run = [&](const fs::path& out, const std::string& taking) {
      fs::create_directories(out);
      std::vector<std::string> settings = lacking;
      if (!taking.empty()) settings.push_back("NO_UNNAMED_FILES_TAKE=" + (dir / taking).string());
      return without_unnamed_files(log, settings, {"rewrite", input, "-o", (out / "m.onnx").string(), "--target", "ort"});
    };
    const std::string tag = no_replace ? "-renamed" : "-linked";

    const fs::path moved_to = dir / ("moved" + tag);
    const auto moved = run(moved_to, "");
    ASSERT_EQ(moved.exit_code, 0) << moved.err;
    EXPECT_EQ(logged(log, 'r'), no_replace ? 0u : 2u) << "each data file's move refused once";
    EXPECT_EQ(logged(log, 'l'), no_replace ? 0u : 2u) << "then linked in";
    EXPECT_EQ(read_file(moved_to / "m.onnx"), expected);
    EXPECT_EQ(names_in(moved_to), (std::vector<std::string>{"a.bin", "m.onnx", "sub"})) << "a temporary file left behind";
    EXPECT_EQ(names_in(moved_to / "sub"), std::vector<std::string>{"b.bin"});
    EXPECT_EQ(read_file(moved_to / "sub/b.bin"), std::string(16, 'b'));
    EXPECT_EQ(fs::status(moved_to / "a.bin").permissions(), fs::perms(0640));

    // The other process's files hold the same bytes: shared.
    const fs::path shared_to = dir / ("shared" + tag);
    const auto shared = run(shared_to, "same");
    ASSERT_EQ(shared.exit_code, 0) << shared.err;
    EXPECT_EQ(logged(log, 't'), 2u) << "both data files found taken";
    EXPECT_EQ(logged(log, 'l'), no_replace ? 0u : 2u);
    EXPECT_EQ(read_file(shared_to / "m.onnx"), expected);
    EXPECT_EQ(names_in(shared_to), (std::vector<std::string>{"a.bin", "m.onnx", "sub"})) << "a temporary file left behind";
    EXPECT_EQ(names_in(shared_to / "sub"), std::vector<std::string>{"b.bin"});
    for (const char* name : {"a.bin", "sub/b.bin"}) {
      EXPECT_EQ(fs::status(shared_to / name).permissions(), fs::perms(0604)) << name << ": the other's file, not replaced";
    }

    // One holds other bytes: refused, nothing of this run's left, the other's file untouched.
    const fs::path refused_to = dir / ("refused" + tag);
    const auto refused = run(refused_to, "other");
    EXPECT_EQ(refused.exit_code, 3) << refused.err;
    EXPECT_EQ(logged(log, 't'), 1u);
    EXPECT_EQ(logged(log, 'l'), no_replace ? 0u : 2u);
    EXPECT_NE(refused.err.find("external data 'sub/b.bin' would replace a different file already in " + (refused_to / "sub").string()),
              std::string::npos)
        << refused.err;
    EXPECT_EQ(names_in(refused_to), std::vector<std::string>{"sub"}) << "a.bin, placed first, taken back; no model";
    EXPECT_EQ(names_in(refused_to / "sub"), std::vector<std::string>{"b.bin"});
    EXPECT_EQ(read_file(refused_to / "sub/b.bin"), std::string(16, 'X'));
  }
}

TEST(ExternalData, OffsetsBeyond4GiBSurviveARewrite) {
  // A model too big for one protobuf: its weight sits 5 GiB into a (sparse) data file.
  TempDir dir;
  const int64_t offset = int64_t{5} << 30;
  onnx::ModelProto proto = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[4] x) => (float[4] y) { y = test.customop.CustomOpOne (x, w) })");
  onnx::ModelProto with_weight;
  ASSERT_TRUE(with_weight.ParseFromString(external_model("big.bin", offset)));
  *proto.mutable_graph()->add_initializer() = with_weight.graph().initializer(0);
  write_file(dir / "m.onnx", serialize(proto));
  write_file(dir / "big.bin", "");
  fs::resize_file(dir / "big.bin", static_cast<uintmax_t>(offset + 16));  // sparse: no disk used
  Model model = load_model(dir / "m.onnx");
  ASSERT_EQ(rewrite_model(model, rules_from_text(kOneToAdd), {}).rules.at("one").matches, 1);
  write_model(model, dir / "out.onnx");
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "out.onnx")));
  EXPECT_EQ(written.graph().node(0).op_type(), "Add");
  EXPECT_EQ(written.graph().initializer(0).SerializeAsString(), proto.graph().initializer(0).SerializeAsString());
  EXPECT_EQ(written.graph().initializer(0).external_data(1).value(), std::to_string(offset));
}

// ---- Atomic writes ----------------------------------------------------------------------------

TEST(AtomicWrite, RefusesToOverwriteTheInputUnlessAskedAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const std::string bytes = serialize(rich_model());
  write_file(dir / "m.onnx", bytes);
  Model model = load_model(dir / "m.onnx");
  rewrite_model(model, rules_from_text(kOneToAdd), {});
  EXPECT_THROW(write_model(model, dir / "m.onnx"), UsageError);
  EXPECT_EQ(read_file(dir / "m.onnx"), bytes) << "the input is untouched";
  EXPECT_THROW(write_model(model, dir / "no/such/dir/out.onnx"), UsageError);
  fs::create_directory(dir / "taken");
  EXPECT_THROW(write_model(model, dir / "taken"), UsageError);

  WriteOptions in_place;
  in_place.allow_overwrite_input = true;
  write_model(model, dir / "m.onnx", in_place);
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "m.onnx")));
  EXPECT_EQ(written.graph().node(1).op_type(), "Add");
  EXPECT_EQ(written.graph().initializer(1).raw_data().size(), 262144u * 4) << "weights read from the replaced file's old inode";
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"m.onnx", "taken"})) << "no temporary file left behind";
}

TEST(AtomicWrite, InPlaceThroughASymbolicLinkReplacesWhatItPointsTo) {
  // Replacing the link itself would leave the real model stale and the link a plain file.
  TempDir dir;
  write_file(dir / "real.onnx", serialize(rich_model()));
  fs::create_symlink("real.onnx", dir / "link.onnx");
  Model model = load_model(dir / "link.onnx");
  rewrite_model(model, rules_from_text(kOneToAdd), {});
  WriteOptions in_place;
  in_place.allow_overwrite_input = true;
  write_model(model, dir / "link.onnx", in_place);
  EXPECT_TRUE(fs::is_symlink(dir / "link.onnx"));
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "real.onnx")));
  EXPECT_EQ(written.graph().node(1).op_type(), "Add");
}

}  // namespace
}  // namespace onnx_rewrite
