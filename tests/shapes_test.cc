// Shape inference (Scope::facts): what rules learn about values nothing declares. Each case is
// checked against ONNX's rules for the op; wrong facts would make rules build wrong graphs.
#include <algorithm>

#include <gtest/gtest.h>

#include "onnx_rewrite/model_io.h"
#include "graph/scope.h"
#include "graph/two_threads.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// The dims inferred for `value` in a model given as ONNX text ("?" for a symbol, "unknown" when
// not even the rank is known).
std::string inferred(const std::string& text, const std::string& value) {
  Model model = model_from_text(text);
  const auto scopes = collect_scopes(model);
  const ShapeFacts& facts = scopes.front()->facts(value);
  return facts.shape ? dims_text(facts.shape) : "unknown";
}

std::string graph(const std::string& inputs, const std::string& body) {
  return "<ir_version: 8, opset_import: [\"\": 17]>\ng (" + inputs + ") => (float y) {\n" + body + "\n}";
}

TEST(Shapes, SliceToTheEndWithInt64Max) {
  // torch's x[1:] is Slice(x, 1, INT64_MAX): exact integers, not a double's INT64_MIN.
  EXPECT_EQ(inferred(graph("float[4] x", R"(
    s = Constant <value = int64[1] {1}> ()
    e = Constant <value = int64[1] {9223372036854775807}> ()
    a = Constant <value = int64[1] {0}> ()
    y = Slice (x, s, e, a))"),
                     "y"),
            "[3]");
}

TEST(Shapes, SliceWithNegativeStepsClampsAsOnnxSays) {
  // start -100 clamps to 0 for a negative step, end -200 to -1: one element (x[0]).
  EXPECT_EQ(inferred(graph("float[4] x", R"(
    s = Constant <value = int64[1] {-100}> ()
    e = Constant <value = int64[1] {-200}> ()
    a = Constant <value = int64[1] {0}> ()
    t = Constant <value = int64[1] {-1}> ()
    y = Slice (x, s, e, a, t))"),
                     "y"),
            "[1]");
  // Reversed whole axis, and every other element backwards.
  EXPECT_EQ(inferred(graph("float[5] x", R"(
    s = Constant <value = int64[1] {-1}> ()
    e = Constant <value = int64[1] {-9223372036854775807}> ()
    a = Constant <value = int64[1] {0}> ()
    t = Constant <value = int64[1] {-2}> ()
    y = Slice (x, s, e, a, t))"),
                     "y"),
            "[3]");
}

TEST(Shapes, SliceOfAHugeAxisIsCountedNotListed) {
  EXPECT_EQ(inferred(graph("float[1000000000000] x", R"(
    s = Constant <value = int64[1] {0}> ()
    e = Constant <value = int64[1] {999999999999}> ()
    a = Constant <value = int64[1] {0}> ()
    y = Slice (x, s, e, a))"),
                     "y"),
            "[999999999999]");
}

TEST(Shapes, ArgMaxReducesOneAxis) {
  EXPECT_EQ(inferred(graph("float[2, 3, 4] x", "y = ArgMax <axis = -1, keepdims = 0> (x)"), "y"), "[2, 3]");
  EXPECT_EQ(inferred(graph("float[2, 3, 4] x", "y = ArgMin (x)"), "y"), "[1, 3, 4]");
}

// Conv and pools: the spatial sizes ONNX Runtime computes (floor, or ceil_mode's rounding up
// without a last window that would start in the end padding), when the input's sizes, the kernel
// (kernel_shape, or Conv's weight) and explicit pads are known; fresh symbols (y#2) otherwise.
TEST(Shapes, ConvAndPoolSpatialSizesFromKnownInputs) {
  const std::string weight = "float[N, 3, 13, 8] x, float[6, 3, 3, 3] w";
  EXPECT_EQ(inferred(graph(weight, "y = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w)"), "y"), "[N, 6, 7, 4]");
  EXPECT_EQ(inferred(graph(weight, "y = Conv <dilations = [2, 1]> (x, w)"), "y"), "[N, 6, 9, 6]");
  EXPECT_EQ(inferred(graph("float[1, 2, 8, 13] x", "y = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (x)"), "y"), "[1, 2, 3, 6]");
  EXPECT_EQ(inferred(graph("float[1, 2, 8, 13] x", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)"), "y"),
            "[1, 2, 4, 6]");
  // ceil would add a window starting at 8, in the end padding: dropped.
  EXPECT_EQ(inferred(graph("float[1, 2, 8, 9] x", "y = AveragePool <ceil_mode = 1, kernel_shape = [3, 3], pads = [0, 0, 2, 2], strides = [2, 2]> (x)"), "y"),
            "[1, 2, 4, 5]");
  EXPECT_EQ(inferred(graph("float[1, 2, H, 9] x", "y = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (x)"), "y"), "[1, 2, y#2, 4]");
  EXPECT_EQ(inferred(graph("float[1, 2, 8, 9] x", "y = MaxPool <auto_pad = \"SAME_UPPER\", kernel_shape = [3, 3]> (x)"), "y"),
            "[1, 2, y#2, y#3]");
}

TEST(Shapes, RangeIsOneDimensionalAndCountedWhenItsBoundsAreKnown) {
  // torch's legacy position ids: Range(0, sequence length, 1) of a length known only at run time.
  EXPECT_EQ(inferred(graph("float[2, 7] x", R"(
    shape = Shape (x)
    one = Constant <value = int64[1] {1}> ()
    length = Gather <axis = 0> (shape, one)
    n = Squeeze (length)
    start = Constant <value = int64 {0}> ()
    step = Constant <value = int64 {1}> ()
    y = Range (start, n, step))"),
                     "y"),
            "[7]");
  EXPECT_EQ(inferred(graph("int64 limit", R"(
    start = Constant <value = int64 {0}> ()
    step = Constant <value = int64 {1}> ()
    y = Range (start, limit, step))"),
                     "y"),
            "[y#0]");  // a symbol of its own
  // ceil((limit - start) / delta), never below 0.
  for (const auto& [bounds, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{0}, {5}, {2}", "[3]"}, {"{5}, {0}, {-2}", "[3]"}, {"{5}, {0}, {2}", "[0]"}, {"{-3}, {3}, {3}", "[2]"}}) {
    std::string start = bounds.substr(0, bounds.find(','));
    std::string rest = bounds.substr(bounds.find(',') + 2);
    std::string limit = rest.substr(0, rest.find(','));
    std::string delta = rest.substr(rest.find(',') + 2);
    EXPECT_EQ(inferred(graph("float x", "s = Constant <value = int64 " + start + "> ()\n l = Constant <value = int64 " + limit +
                                            "> ()\n d = Constant <value = int64 " + delta + "> ()\n y = Range (s, l, d)"),
                       "y"),
              expected)
        << bounds;
  }
}

TEST(Shapes, MalformedAttributesGiveNoFactsInsteadOfACrash) {
  EXPECT_EQ(inferred(graph("float[2, 3] x", "t = Transpose <perm = [1, 100000000]> (x)\n y = Identity (t)"), "t"),
            "unknown");
  EXPECT_EQ(inferred(graph("float[2, 3] x", "t = Transpose <perm = [0, 0]> (x)\n y = Identity (t)"), "t"), "unknown");
  EXPECT_EQ(inferred(graph("float[2, 3] x", "t = Transpose <perm = [1, 0]> (x)\n y = Identity (t)"), "t"), "[3, 2]");
}

TEST(Shapes, DeclaredDimsThatDisagreeWithAConstantAreNotTrusted) {
  // value_info claims 100000 elements for a 3-element constant; slicing it must not read past it.
  onnx::ModelProto proto = parse_model_text(graph("float[2] x", R"(
    c = Constant <value = int64[3] {4, 5, 6}> ()
    s = Constant <value = int64[1] {1}> ()
    e = Constant <value = int64[1] {100000}> ()
    a = Constant <value = int64[1] {0}> ()
    y = Slice (c, s, e, a))"));
  auto* info = proto.mutable_graph()->add_value_info();
  info->set_name("c");
  info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  info->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(100000);
  Model model = parse_model(serialize(proto), "m.onnx");
  const auto scopes = collect_scopes(model);
  const ShapeFacts& facts = scopes.front()->facts("y");
  EXPECT_FALSE(facts.values.has_value());
}

TEST(Shapes, SymbolsProveEqualSizesThroughShapeKeepingOps) {
  const std::string text = graph("float[N, 8] x", R"(
    a = Relu (x)
    b = Sigmoid (x)
    y = Add (a, b))");
  EXPECT_EQ(inferred(text, "y"), "[N, 8]");
}

// Loop's outputs have the element types its body declares (range-11-lowering builds one, and the
// import check below 11 needs the types of what reads it).
TEST(Shapes, LoopOutputsHaveTheTypesItsBodyDeclares) {
  Model model = model_from_text(graph("int64 n, bool go, int32 start", R"(
    last, values = Loop <body = g (int64 i, bool c, int32 v) => (bool c_out, int32 v_out, int32 scan) {
      c_out = Identity (c)
      v_out = Identity (v)
      scan = Identity (v)
    }> (n, go, start)
    y = Cast <to = 1> (values))"));
  const auto scopes = collect_scopes(model);
  EXPECT_EQ(scopes.front()->facts("last").elem_type, onnx::TensorProto::INT32);
  EXPECT_EQ(scopes.front()->facts("values").elem_type, onnx::TensorProto::INT32);
}

TEST(Shapes, ACycleEndsTheWalkWithNoFactsForItsValues) {
  // Invalid input (the CLI refuses it), but the library takes what it is given: the walk back
  // from y must end, and the values on the cycle are unknown.
  Model model = model_from_text(graph("float[2] x", R"(
    a = Add (x, b)
    b = Relu (a)
    y = Mul (a, x))"));
  const auto scopes = collect_scopes(model);
  const Scope& scope = *scopes.front();
  scope.facts("y");
  EXPECT_EQ(scope.facts("b").elem_type, 0);
  EXPECT_FALSE(scope.facts("b").shape.has_value());
  EXPECT_EQ(scope.facts("x").elem_type, onnx::TensorProto::FLOAT);
}

// The constants a scope reads (constant_values): what they hold, read again once the round's
// facts are forgotten (a commit may change them), and found after an earlier one is removed.
// A model given as its main graph's text, and that graph's scope (which views the model: a
// MainGraph stays where it was made).
struct MainGraph {
  explicit MainGraph(const std::string& graph_text)
      : model(model_from_text("<ir_version: 8, opset_import: [\"\": 17]>\n" + graph_text)), scopes(collect_scopes(model)) {}
  MainGraph(const MainGraph&) = delete;
  MainGraph& operator=(const MainGraph&) = delete;
  const Scope& scope() const { return *scopes.front(); }
  onnx::GraphProto& graph() { return *model.proto.mutable_graph(); }

  Model model;
  std::vector<std::unique_ptr<Scope>> scopes;
};

TEST(ScopeConstants, AChangedConstantIsReadAgainOnceFactsAreForgotten) {
  MainGraph main("g (float[2] x) => (float[2] y) {\n  c = Constant <value = float[2] {1, 2}> ()\n  y = Mul (x, c)\n}");
  const Scope& scope = main.scope();
  ASSERT_EQ(scope.constant_values("c")->numbers, (std::vector<double>{1, 2}));
  onnx::TensorProto& c = *main.graph().mutable_node(0)->mutable_attribute(0)->mutable_t();
  c.clear_float_data();
  c.clear_raw_data();
  c.add_float_data(5);
  c.add_float_data(7);
  EXPECT_EQ(scope.constant_values("c")->numbers, (std::vector<double>{1, 2}));  // kept within a round
  scope.forget_facts();
  EXPECT_EQ(scope.constant_values("c")->numbers, (std::vector<double>{5, 7}));
}

TEST(ScopeConstants, AValueBothAnInitializerAndANodesOutputReadsAsTheInitializer) {
  // Invalid (computed twice: the CLI refuses it), but the library takes what it is given, and
  // has always read the initializer: the matcher and the scope must agree.
  MainGraph main("g (float[1] x) => (float[1] y) <float[1] c = {1}> {\n  c = Relu (x)\n  y = Mul (x, c)\n}");
  EXPECT_TRUE(main.scope().is_constant("c"));
  const auto values = main.scope().constant_values("c");
  ASSERT_TRUE(values.has_value());
  EXPECT_EQ(values->numbers, (std::vector<double>{1}));
}

TEST(ScopeConstants, AnInitializerIsFoundAfterAnEarlierOneIsRemoved) {
  MainGraph main("g (float[1] x) => (float[1] y) <float[1] a = {3}, float[1] b = {4}> {\n  t = Mul (x, a)\n  y = Mul (t, b)\n}");
  main.graph().mutable_initializer()->DeleteSubrange(0, 1);  // b moves to a's place
  const onnx::TensorProto* b = main.scope().constant_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name(), "b");
}

// A big graph's reads are indexed on two threads (kBigGraphNodes and more): the index must be the
// one a single pass gives. A chain of more Adds than that, reading one initializer each,
// the graph input every 1,000th, and a second graph input first read in the second half (where
// the initializer is read first: its id must still come from the first half's reads).
TEST(ScopeIndex, ABigGraphsReadsAreIndexedInNodeOrder) {
  constexpr int kNodes = (static_cast<int>(kBigGraphNodes) / 4000 + 3) * 4000;  // 60,000: halves and quarters in thousands
  constexpr int kHalf = kNodes / 2, kLate = kNodes * 3 / 4;
  Model model;
  model.proto.set_ir_version(8);
  model.proto.add_opset_import()->set_version(17);
  auto& graph = *model.proto.mutable_graph();
  graph.add_input()->set_name("x");
  graph.add_input()->set_name("z");
  auto& w = *graph.add_initializer();
  w.set_name("w");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_float_data(1);
  std::string last = "x";
  for (int i = 0; i < kNodes; ++i) {
    auto& node = *graph.add_node();
    node.set_op_type("Add");
    node.add_input(last);
    node.add_input(i == kLate ? "z" : i % 1000 == 7 ? "x" : "w");
    last = "v" + std::to_string(i);
    node.add_output(last);
  }
  graph.add_output()->set_name(last);
  const auto scopes = collect_scopes(model);
  const Scope& scope = *scopes.front();

  // Names no node computes get ids after the nodes' outputs, in the order first read.
  ASSERT_TRUE(scope.value_id("x") && scope.value_id("w") && scope.value_id("z"));
  EXPECT_EQ(scope.value_id("x")->index, static_cast<uint32_t>(kNodes));
  EXPECT_EQ(scope.value_id("w")->index, static_cast<uint32_t>(kNodes + 1));
  EXPECT_EQ(scope.value_id("z")->index, static_cast<uint32_t>(kNodes + 2));
  for (const int position : {0, 1, kHalf - 1, kHalf, kLate, kNodes - 1}) {
    const auto reads = scope.reads_at(position);
    ASSERT_EQ(reads.size(), 2u) << position;
    EXPECT_EQ(scope.name(reads[0]), graph.node(position).input(0)) << position;
    EXPECT_EQ(scope.name(reads[1]), graph.node(position).input(1)) << position;
  }
  // Uses in node order, across the two halves.
  auto positions_of = [&](std::string_view value) {
    std::vector<int> positions;
    for (const Use& use : scope.uses(value)) {
      EXPECT_EQ(use.node, &graph.node(use.position));
      EXPECT_EQ(graph.node(use.position).input(use.input), value);
      positions.push_back(use.position);
    }
    return positions;
  };
  std::vector<int> reading_x{0};  // the first Add reads x, as its first input
  for (int i = 7; i < kNodes; i += 1000) reading_x.push_back(i);
  EXPECT_EQ(positions_of("x"), reading_x);
  const auto reading_w = positions_of("w");
  EXPECT_EQ(reading_w.size(), static_cast<size_t>(kNodes - kNodes / 1000 - 1));
  EXPECT_TRUE(std::is_sorted(reading_w.begin(), reading_w.end()));
  EXPECT_EQ(positions_of("z"), std::vector<int>{kLate});
  const std::string last_of_first_half = "v" + std::to_string(kHalf - 1);
  EXPECT_EQ(positions_of(last_of_first_half), std::vector<int>{kHalf});
  ASSERT_NE(scope.producer(last_of_first_half), nullptr);
  EXPECT_EQ(scope.producer(last_of_first_half)->position, kHalf - 1);
}

}  // namespace
}  // namespace onnx_rewrite
