// TensorRT NMS plugins (trt-nms.rules, trt_nms.cc): EfficientNMS_TRT, BatchedNMS_TRT /
// BatchedNMSDynamic_TRT and mmdeploy's TRTBatchedNMS in every input and attribute form their
// exporters write, rewritten into NonMaxSuppression + TopK + Gather, checked loadable for both
// targets and run in ONNX Runtime against naive references of the plugins (efficient_nms.js,
// batched_nms.js): on random data, on data quantized so that scores tie and meet the thresholds
// exactly, and at YOLOv8's size.
#include <gtest/gtest.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

fs::path module(const char* name) { return source_dir() / "rules" / "trt-nms" / name; }

int count(const onnx::ModelProto& model, const std::string& op) {
  int n = 0;
  for (const auto& node : model.graph().node()) n += node.op_type() == op;
  return n;
}

std::optional<CheckedRewrite> rewritten(const fs::path& input, const fs::path& output) {
  auto result = rewrite_and_check(input, output, "onnx");
  if (!result) return std::nullopt;
  const CommandResult ort = run_cli({"check", output.string(), "--target", "ort"});
  EXPECT_EQ(ort.exit_code, 0) << ort.out << ort.err;
  EXPECT_EQ(count(result->model, "NonMaxSuppression"), 1);
  return result;
}

std::vector<std::string> with(std::vector<std::string> options, const std::vector<std::string>& more) {
  options.insert(options.end(), more.begin(), more.end());
  return options;
}

// ---- EfficientNMS_TRT ---------------------------------------------------------------------------

struct Efficient {
  std::string name = {};
  std::string domain = "TRT";
  int opset = 11;
  int batch = 2, anchors = 40, classes = 3, max_boxes = 30;
  std::string boxes = "shared";  // [B, N, 4]; "shared4": [B, N, 1, 4]; "per_class": [B, N, C, 4]
  bool scores4 = false;          // scores [B, N, C, 1]
  std::string anchor_input = {};  // "": two inputs; "one": anchors [1, N, 4]; "batch": [B, N, 4]
  double score_threshold = 0.3, iou_threshold = 0.5;
  int background = -1, activation = 0, coding = 0;
  std::optional<int> agnostic = {};  // absent unless set
  bool tuples = false;           // background_class and box_coding as 1-tuples (yolov7)
  bool symbolic = false;         // B and N symbolic
  int quantize_scores = 0, quantize_boxes = 0;
  bool sparse = false;           // boxes scaled by [100, 100, 1, 1] first (center-size: few overlaps)
  std::string num_type = "int32";

  std::string dims(const std::string& tail) const {
    return symbolic ? fmt::format("B, N{}", tail) : fmt::format("{}, {}{}", batch, anchors, tail);
  }
  std::string model() const {
    const std::string box_dims = dims(boxes == "shared" ? ", 4" : boxes == "shared4" ? ", 1, 4" : fmt::format(", {}, 4", classes));
    const std::string score_dims = dims(fmt::format(", {}{}", classes, scores4 ? ", 1" : ""));
    std::string inputs = fmt::format("float[{}] boxes, float[{}] scores", box_dims, score_dims);
    if (!anchor_input.empty()) {
      inputs += fmt::format(", float[{}, {}, 4] anchors", anchor_input == "one" ? "1" : symbolic ? "B" : std::to_string(batch),
                            symbolic ? "N" : std::to_string(anchors));
    }
    std::string prelude, b = "boxes", s = "scores";
    if (quantize_boxes) {
      prelude += fmt::format("  qb = Constant <value = float {{{}.0}}> ()\n  b1 = Mul (boxes, qb)\n  b2 = Floor (b1)\n  bq = Div (b2, qb)\n",
                             quantize_boxes);
      b = "bq";
    }
    if (sparse) {
      prelude += "  spread = Constant <value = float[4] {100.0, 100.0, 1.0, 1.0}> ()\n  bs = Mul (" + b + ", spread)\n";
      b = "bs";
    }
    if (quantize_scores) {
      prelude += fmt::format("  qs = Constant <value = float {{{}.0}}> ()\n  s1 = Mul (scores, qs)\n  s2 = Floor (s1)\n  sq = Div (s2, qs)\n",
                             quantize_scores);
      s = "sq";
    }
    const std::string batch_dim = symbolic ? "B" : std::to_string(batch);
    std::string attributes = fmt::format(
        "background_class = {}, box_coding = {}, iou_threshold = {}, max_output_boxes = {}, plugin_version = \"1\", "
        "score_activation = {}, score_threshold = {}",
        tuples ? fmt::format("[{}]", background) : std::to_string(background), tuples ? fmt::format("[{}]", coding) : std::to_string(coding),
        iou_threshold, max_boxes, activation, score_threshold);
    if (agnostic) attributes += fmt::format(", class_agnostic = {}", *agnostic);
    const std::string op = domain.empty() ? "EfficientNMS_TRT" : domain + ".EfficientNMS_TRT";
    const std::string imports = domain.empty() ? fmt::format("\"\": {}", opset) : fmt::format("\"\": {}, \"{}\": 1", opset, domain);
    return fmt::format(
        "<ir_version: 8, opset_import: [{0}]>\n"
        "g ({1}) => ({2}[{3}, 1] num, float[{3}, {4}, 4] det_boxes, float[{3}, {4}] det_scores, int32[{3}, {4}] det_classes) {{\n"
        "{5}  num, det_boxes, det_scores, det_classes = {6} <{7}> ({8}, {9}{10})\n}}\n",
        imports, inputs, num_type, batch_dim, max_boxes, prelude, op, attributes, b, s, anchor_input.empty() ? "" : ", anchors");
  }
  std::string params(const std::string& extra = "") const {
    std::string p = fmt::format(
        R"({{"score_threshold": {}, "iou_threshold": {}, "max_output_boxes": {}, "background_class": {}, "score_activation": {}, )"
        R"("box_coding": {}, "class_agnostic": {}, "numDetections": "num", "detectionBoxes": "det_boxes", )"
        R"("detectionScores": "det_scores", "detectionClasses": "det_classes", "quantizeScores": {}, "quantizeBoxes": {})",
        score_threshold, iou_threshold, max_boxes, background, activation, coding, agnostic.value_or(0), quantize_scores, quantize_boxes);
    if (sparse) p += R"(, "boxScale": [100, 100, 1, 1])";
    return p + extra + "}";
  }
  std::vector<std::string> options() const {
    std::vector<std::string> o{"--range", anchor_input.empty() ? "boxes=0,1" : "boxes=-0.5,0.5", "--range", "anchors=0,1",
                               "--range", activation ? "scores=-3,3" : quantize_scores ? "scores=0,1" : "scores=-2,1"};
    if (anchor_input.empty()) o = {o[0], o[1], o[4], o[5]};
    if (symbolic) o.insert(o.end(), {"--dim", fmt::format("B={}", batch), "--dim", fmt::format("N={}", anchors)});
    // Exact but for the sigmoid of score_activation (ORT's vectorized Sigmoid vs exp) and exp() of the box decoder.
    return with(o, {"--atol", activation || (coding && !anchor_input.empty()) ? "1e-6" : "0", "--rtol",
                    activation || (coding && !anchor_input.empty()) ? "1e-5" : "0"});
  }
};

void PrintTo(const Efficient& c, std::ostream* out) { *out << c.name; }

std::vector<Efficient> efficient_cases() {
  std::vector<Efficient> all;
  auto add = [&](Efficient c) { all.push_back(std::move(c)); };
  add({.name = "yolov8_trt_domain"});
  add({.name = "yolov7_tuples_center_size", .coding = 1, .tuples = true});
  {
    Efficient c{.name = "graphsurgeon_default_domain_agnostic", .domain = "", .opset = 13, .boxes = "shared4"};
    c.agnostic = 1;
    add(c);
  }
  add({.name = "sigmoid_scores", .score_threshold = 0.4, .activation = 1});
  add({.name = "background_class_1", .background = 1});
  add({.name = "per_class_boxes", .boxes = "per_class"});
  {
    Efficient c{.name = "per_class_boxes_agnostic_center_size", .boxes = "per_class", .coding = 1};
    c.agnostic = 1;
    add(c);
  }
  add({.name = "scores_rank4_class_agnostic_0", .scores4 = true, .agnostic = 0});
  add({.name = "symbolic_batch_and_boxes", .symbolic = true});
  add({.name = "anchors_shared_corners", .anchor_input = "one"});
  add({.name = "anchors_per_image_center_size", .anchor_input = "batch", .activation = 1, .coding = 1});
  add({.name = "anchors_per_class_boxes_center_size", .boxes = "per_class", .anchor_input = "one", .coding = 1});
  add({.name = "num_detections_declared_int64", .num_type = "int64"});
  add({.name = "opset_18_axes_as_inputs", .opset = 18, .boxes = "per_class"});
  return all;
}

class EfficientNms : public ::testing::TestWithParam<Efficient> {};

TEST_P(EfficientNms, MatchesThePluginInOnnxRuntime) {
  const Efficient& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const auto result = rewritten(input, dir / "out.onnx");
  ASSERT_TRUE(result);
  auto params = c.params();
  if (c.num_type == "int64") params.pop_back(), params += R"(, "numType": "int64"})";
  const auto comparison = ort_compare_reference(result->output, module("efficient_nms.js"), params, c.options());
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("EfficientNMS " + c.name, comparison);
}

INSTANTIATE_TEST_SUITE_P(Forms, EfficientNms, ::testing::ValuesIn(efficient_cases()), [](const auto& info) { return info.param.name; });

// Scores in steps of 1/8 and boxes in steps of 1/4: scores tie and equal the threshold 0.5, IoUs
// equal 0.5 or 1/3 exactly. The rewrite matches the plugin's >= to the bit (ties in element
// order n*C + c); a reference comparing with > differs on the same data, so the data does meet
// the thresholds.
TEST(EfficientNmsBoundaries, ThresholdsMetExactlyAndTies) {
  TempDir dir;
  for (double iou : {0.5, 1.0 / 3}) {
    for (int agnostic : {0, 1}) {
      Efficient c{.name = "boundaries", .score_threshold = 0.5, .quantize_scores = 8, .quantize_boxes = 4};
      c.iou_threshold = iou;
      c.agnostic = agnostic;
      const auto input = write_model_text(c.model(), dir / "in.onnx");
      const auto result = rewritten(input, dir / "out.onnx");
      ASSERT_TRUE(result);
      auto options = with(c.options(), {"--trials", "4"});
      options[1] = "boxes=0,2";
      const auto exact = ort_compare_reference(result->output, module("efficient_nms.js"), c.params(), options);
      EXPECT_TRUE(exact.ok) << "iou " << iou << " agnostic " << agnostic << ": " << exact.output;
      report_numbers(fmt::format("EfficientNMS boundaries iou {:.4f} agnostic {}", iou, agnostic), exact);
      const auto strict = ort_compare_reference(result->output, module("efficient_nms.js"), c.params(R"(, "strictThresholds": true)"), options);
      EXPECT_EQ(strict.exit_code, 1) << "the data never meets a threshold: " << strict.output;
    }
  }
}

// More than 5000 elements pass the threshold: the plugin keeps the 5000 best of each image.
// Sparse boxes (few overlaps) so that nearly everything survives NMS and the cap shows; many
// classes of few boxes keep the naive reference fast.
TEST(EfficientNmsBoundaries, FiveThousandCandidates) {
  TempDir dir;
  Efficient c{.name = "cap", .batch = 1, .anchors = 51, .classes = 100, .max_boxes = 5100, .coding = 1, .sparse = true};
  c.score_threshold = 0.0;
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const auto result = rewritten(input, dir / "out.onnx");
  ASSERT_TRUE(result);
  const auto options = with({"--range", "boxes=0,1", "--range", "scores=0,1", "--trials", "1"}, {"--atol", "0", "--rtol", "0"});
  const auto capped = ort_compare_reference(result->output, module("efficient_nms.js"), c.params(), options);
  EXPECT_TRUE(capped.ok) << capped.output;
  report_numbers("EfficientNMS 5100 candidates, the 5000 best", capped);
  const auto uncapped = ort_compare_reference(result->output, module("efficient_nms.js"), c.params(R"(, "maxCandidates": 100000)"), options);
  EXPECT_EQ(uncapped.exit_code, 1) << uncapped.output;
}

// YOLOv8 as triple-Mu/YOLOv8-TensorRT exports it: 8400 boxes, 80 classes, 100 detections.
TEST(EfficientNmsBoundaries, Yolov8Size) {
  TempDir dir;
  Efficient c{.name = "yolov8", .batch = 1, .anchors = 8400, .classes = 80, .max_boxes = 100};
  c.score_threshold = 0.25, c.iou_threshold = 0.65;
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const auto result = rewritten(input, dir / "out.onnx");
  ASSERT_TRUE(result);
  const auto comparison = ort_compare_reference(result->output, module("efficient_nms.js"), c.params(),
                                                {"--range", "boxes=0,640", "--range", "scores=0,1", "--trials", "1", "--atol", "0", "--rtol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("EfficientNMS YOLOv8 1 x 8400 x 80, 100 detections", comparison);
}

// ---- BatchedNMS_TRT / BatchedNMSDynamic_TRT ------------------------------------------------------

struct Batched {
  std::string name = {};
  std::string op = "BatchedNMSDynamic_TRT";
  std::string domain = {};
  int opset = 13;
  int batch = 2, anchors = 50, classes = 3, top_k = 40, keep = 40;
  bool share = true, scores4 = false;
  int normalized = 1;
  std::optional<int> clip = {}, caffe = {};  // absent unless set
  int background = -1;
  double score_threshold = 0.7, iou_threshold = 0.45;
  int quantize_scores = 0, quantize_boxes = 0;
  bool num_rank1 = false;

  int locations() const { return share ? 1 : classes; }
  std::string model() const {
    std::string attributes = fmt::format(
        "backgroundLabelId = {}, iouThreshold = {}, isNormalized = {}, keepTopK = {}, numClasses = {}, scoreBits = 16, "
        "scoreThreshold = {}, shareLocation = {}, topK = {}",
        background, iou_threshold, normalized, keep, classes, score_threshold, share ? 1 : 0, top_k);
    if (clip) attributes += fmt::format(", clipBoxes = {}", *clip);
    if (caffe) attributes += fmt::format(", caffeSemantics = {}", *caffe);
    std::string prelude, xy = "xy", wh = "wh", s = "scores";
    if (quantize_boxes) {
      prelude += fmt::format(
          "  qb = Constant <value = float {{{}.0}}> ()\n  x1 = Mul (xy, qb)\n  x2 = Floor (x1)\n  xq = Div (x2, qb)\n"
          "  w1 = Mul (wh, qb)\n  w2 = Floor (w1)\n  wq = Div (w2, qb)\n",
          quantize_boxes);
      xy = "xq", wh = "wq";
    }
    if (quantize_scores) {
      prelude += fmt::format("  qs = Constant <value = float {{{}.0}}> ()\n  s1 = Mul (scores, qs)\n  s2 = Floor (s1)\n  sq = Div (s2, qs)\n",
                             quantize_scores);
      s = "sq";
    }
    if (scores4) {
      prelude += "  four = Constant <value = int64[1] {3}> ()\n  s4 = Unsqueeze (" + s + ", four)\n";
      s = "s4";
    }
    const std::string op_name = domain.empty() ? op : domain + "." + op;
    const std::string imports = domain.empty() ? fmt::format("\"\": {}", opset) : fmt::format("\"\": {}, \"{}\": 1", opset, domain);
    return fmt::format(
        "<ir_version: 8, opset_import: [{0}]>\n"
        "g (float[{1}, {2}, {3}, 2] xy, float[{1}, {2}, {3}, 2] wh, float[{1}, {2}, {4}] scores) =>\n"
        "  (int32[{1}{5}] num_detections, float[{1}, {6}, 4] nmsed_boxes, float[{1}, {6}] nmsed_scores, float[{1}, {6}] nmsed_classes) {{\n"
        "{7}  x2y2 = Add ({8}, {9})\n  boxes = Concat <axis = -1> ({8}, x2y2)\n"
        "  num_detections, nmsed_boxes, nmsed_scores, nmsed_classes = {10} <{11}> (boxes, {12})\n}}\n",
        imports, batch, anchors, locations(), classes, num_rank1 ? "" : ", 1", keep, prelude, xy, wh, op_name, attributes, s);
  }
  std::string params(const std::string& extra = "") const {
    return fmt::format(
        R"({{"variant": "trt", "boxesFrom": "xywh", "shareLocation": {}, "backgroundLabelId": {}, "numClasses": {}, "topK": {}, )"
        R"("keepTopK": {}, "scoreThreshold": {}, "iouThreshold": {}, "isNormalized": {}, "clipBoxes": {}, "caffeSemantics": {}, )"
        R"("quantizeScores": {}, "quantizeBoxes": {}{}}})",
        share ? 1 : 0, background, classes, top_k, keep, score_threshold, iou_threshold, normalized, clip.value_or(1), caffe.value_or(1),
        quantize_scores, quantize_boxes, extra);
  }
  std::vector<std::string> options() const {
    const bool pixels = normalized == 0;
    return {"--range", pixels ? "xy=0,60" : "xy=-0.2,1", "--range", pixels ? "wh=2,40" : "wh=0,0.7", "--range", "scores=0,1",
            "--atol", "0", "--rtol", "0"};
  }
};

void PrintTo(const Batched& c, std::ostream* out) { *out << c.name; }

std::vector<Batched> batched_cases() {
  std::vector<Batched> all;
  all.push_back({.name = "dynamic_shared_normalized"});
  all.push_back({.name = "static_name_per_class_clip_0", .op = "BatchedNMS_TRT", .share = false, .clip = 0});
  all.push_back({.name = "trt_domain_background_1", .domain = "TRT", .background = 1});
  all.push_back({.name = "pixels_caffe_default", .normalized = 0, .clip = 0});
  all.push_back({.name = "pixels_caffe_per_class_opset_11", .opset = 11, .share = false, .normalized = 0, .caffe = 1});
  all.push_back({.name = "top_k_below_n_keep_saturated", .top_k = 12, .keep = 10, .score_threshold = 0.3});
  all.push_back({.name = "top_k_above_n_scores_rank4", .top_k = 80, .keep = 60, .scores4 = true});
  all.push_back({.name = "caffe_off_normalized", .caffe = 0});
  all.push_back({.name = "num_detections_rank1", .num_rank1 = true});
  all.push_back({.name = "opset_18_per_class", .opset = 18, .top_k = 20, .keep = 20, .share = false});
  return all;
}

class BatchedNms : public ::testing::TestWithParam<Batched> {};

TEST_P(BatchedNms, MatchesThePluginInOnnxRuntime) {
  const Batched& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const auto result = rewritten(input, dir / "out.onnx");
  ASSERT_TRUE(result);
  std::string params = c.params();
  if (c.num_rank1) params.pop_back(), params += R"(, "numRank1": true})";
  const auto comparison = ort_compare_reference(result->output, module("batched_nms.js"), params, c.options());
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("BatchedNMS " + c.name, comparison);
}

INSTANTIATE_TEST_SUITE_P(Forms, BatchedNms, ::testing::ValuesIn(batched_cases()), [](const auto& info) { return info.param.name; });

// Scores in steps of 1/8 meet the threshold 0.5 and tie (order: class, then rank); boxes in steps
// of 1/4 meet the IoU threshold. A reference comparing with >= differs on the same data.
TEST(BatchedNmsBoundaries, ThresholdsMetExactlyAndTies) {
  TempDir dir;
  for (bool share : {true, false}) {
    Batched c{.name = "boundaries", .share = share, .score_threshold = 0.5, .iou_threshold = 0.5, .quantize_scores = 8, .quantize_boxes = 4};
    const auto input = write_model_text(c.model(), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    const std::vector<std::string> options{"--range", "xy=0,2", "--range", "wh=0,1.5", "--range", "scores=0,1", "--trials", "4",
                                           "--atol", "0", "--rtol", "0"};
    const auto exact = ort_compare_reference(result->output, module("batched_nms.js"), c.params(), options);
    EXPECT_TRUE(exact.ok) << exact.output;
    report_numbers(fmt::format("BatchedNMS boundaries, {} boxes", share ? "shared" : "per-class"), exact);
    const auto inclusive = ort_compare_reference(result->output, module("batched_nms.js"), c.params(R"(, "inclusiveThresholds": true)"), options);
    EXPECT_EQ(inclusive.exit_code, 1) << "the data never meets a threshold: " << inclusive.output;
  }
}

// Where Caffe semantics are not reproduced: boxes of one pixel (x2 = x1) apart. The plugin's IoU
// of two such disjoint boxes is 1 / (1 + 1 - 1) = 1, so it keeps one box per class;
// NonMaxSuppression sees no overlap. The rewrite says so in a note.
TEST(BatchedNmsBoundaries, CaffeSemanticsDifferForDisjointPixelBoxes) {
  TempDir dir;
  Batched c{.name = "caffe_points", .anchors = 12, .normalized = 0, .clip = 0, .score_threshold = 0.1};
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const CommandResult rewrite = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string()});
  ASSERT_EQ(rewrite.exit_code, 0) << rewrite.out << rewrite.err;
  EXPECT_NE(rewrite.out.find("for boxes apart (by any gap) the plugin's IoU is 1 / (area1 + area2 - 1)"), std::string::npos) << rewrite.out;
  const std::vector<std::string> points{"--range", "xy=0,200", "--range", "wh=0,0", "--range", "scores=0,1", "--atol", "0", "--rtol", "0"};
  EXPECT_EQ(ort_compare_reference(dir / "out.onnx", module("batched_nms.js"), c.params(), points).exit_code, 1);
  // Boxes of a few pixels or more, apart or not: the same.
  const std::vector<std::string> boxes{"--range", "xy=0,200", "--range", "wh=3,30", "--range", "scores=0,1", "--atol", "0", "--rtol", "0"};
  EXPECT_TRUE(ort_compare_reference(dir / "out.onnx", module("batched_nms.js"), c.params(), boxes).ok);
}

// ---- mmdeploy TRTBatchedNMS ----------------------------------------------------------------------

struct Mmdeploy {
  std::string name = {};
  int batch = 2, classes = 3, keep = 15;
  std::string anchors = "50";  // or a symbolic name
  bool share = true, return_index = true, clip = false;
  int top_k = -1, background = -1;
  std::string labels_type = "int32";

  std::string model() const {
    const int l = share ? 1 : classes;
    const std::string index_out = return_index ? fmt::format(", int32[{}, {}] index", batch, keep) : "";
    return fmt::format(
        "<ir_version: 6, opset_import: [\"\": 11, \"mmdeploy\": 1]>\n"
        "g (float[{0}, {1}, {2}, 2] xy, float[{0}, {1}, {2}, 2] wh, float[{0}, {1}, {3}] scores) =>\n"
        "  (float[{0}, {4}, 5] dets, {5}[{0}, {4}] labels{6}) {{\n"
        "  x2y2 = Add (xy, wh)\n  boxes = Concat <axis = -1> (xy, x2y2)\n"
        "  dets, labels{7} = mmdeploy.TRTBatchedNMS <background_label_id = {8}, clip_boxes = {9}, iou_threshold = 0.45, "
        "is_normalized = 0, keep_topk = {4}, num_classes = {3}, return_index = {10}, score_threshold = 0.6, topk = {11}> (boxes, scores)\n}}\n",
        batch, anchors, l, classes, keep, labels_type, index_out, return_index ? ", index" : "", background, clip ? 1 : 0,
        return_index ? 1 : 0, top_k);
  }
  std::string params() const {
    return fmt::format(
        R"({{"variant": "mmdeploy", "boxesFrom": "xywh", "background_label_id": {}, "num_classes": {}, "topk": {}, "keep_topk": {}, )"
        R"("score_threshold": 0.6, "iou_threshold": 0.45, "clip_boxes": {}, "labelsType": "{}"}})",
        background, classes, top_k, keep, clip ? 1 : 0, labels_type);
  }
};

void PrintTo(const Mmdeploy& c, std::ostream* out) { *out << c.name; }

class MmdeployNms : public ::testing::TestWithParam<Mmdeploy> {};

// Widths and heights in [-0.2, 0.5]: some boxes are reversed (x2 < x1), which mmdeploy's IoU
// treats as overlapping nothing.
TEST_P(MmdeployNms, MatchesThePluginInOnnxRuntime) {
  const Mmdeploy& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(c.model(), dir / "in.onnx");
  const auto result = rewritten(input, dir / "out.onnx");
  ASSERT_TRUE(result);
  std::vector<std::string> options{"--range", "xy=0,1", "--range", "wh=-0.2,0.5", "--range", "scores=0,1", "--atol", "0", "--rtol", "0"};
  if (c.anchors == "N") options.insert(options.end(), {"--dim", "N=37"});
  const auto comparison = ort_compare_reference(result->output, module("batched_nms.js"), c.params(), options);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("TRTBatchedNMS " + c.name, comparison);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, MmdeployNms,
    ::testing::Values(Mmdeploy{.name = "retinanet_shared"}, Mmdeploy{.name = "faster_rcnn_per_class", .share = false},
                      Mmdeploy{.name = "topk_20_no_index", .return_index = false, .top_k = 20},
                      Mmdeploy{.name = "topk_above_n_clip_background_0", .clip = true, .top_k = 80, .background = 0},
                      Mmdeploy{.name = "labels_declared_int64", .labels_type = "int64"},
                      Mmdeploy{.name = "symbolic_boxes_per_class_topk_30", .anchors = "N", .share = false, .top_k = 30}),
    [](const auto& info) { return info.param.name; });

// ---- Declines ------------------------------------------------------------------------------------

struct Decline {
  std::string name;
  std::string model;
  std::string reason;
  std::string op;
};

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at == std::string::npos) throw std::logic_error("test model has no '" + from + "'");
  return text.replace(at, from.size(), to);
}

std::vector<Decline> declines() {
  const std::string efficient = Efficient{.name = "e"}.model(), batched = Batched{.name = "b"}.model(), mm = Mmdeploy{.name = "m"}.model();
  return {
      {"efficient_no_score_threshold", replaced(efficient, ", score_threshold = 0.3", ""),
       "attribute score_threshold is missing (the plugin requires it)", "EfficientNMS_TRT"},
      {"efficient_iou_0", replaced(efficient, "iou_threshold = 0.5", "iou_threshold = 0.0"),
       "iou_threshold = 0 is not positive (the plugin refuses it)", "EfficientNMS_TRT"},
      {"efficient_box_coding_2", replaced(efficient, "box_coding = 0", "box_coding = 2"), "box_coding = 2 is not 0 or 1", "EfficientNMS_TRT"},
      {"efficient_float16", replaced(replaced(efficient, "float[2, 40, 4] boxes", "float16[2, 40, 4] boxes"), "float[2, 40, 3] scores",
                                     "float16[2, 40, 3] scores"),
       "boxes is float16: ONNX NonMaxSuppression takes float only", "EfficientNMS_TRT"},
      {"efficient_locations_unknown", replaced(efficient, "float[2, 40, 4] boxes", "float[2, 40, L, 4] boxes"),
       "boxes [B, N, ?, 4]: whether they are shared (1) or per class (C) is unknown", "EfficientNMS_TRT"},
      {"batched_no_is_normalized", replaced(batched, "isNormalized = 1, ", ""),
       "isNormalized is absent: the plugin leaves it uninitialized", "BatchedNMSDynamic_TRT"},
      {"batched_pixels_without_caffe", replaced(batched, "isNormalized = 1", "isNormalized = 0, caffeSemantics = 0"),
       "isNormalized = 0 with caffeSemantics = 0", "BatchedNMSDynamic_TRT"},
      {"batched_top_k_5000", replaced(batched, "topK = 40", "topK = 5000"), "topK = 5000 exceeds the plugin's limit of 4096",
       "BatchedNMSDynamic_TRT"},
      {"batched_keep_above_top_k", replaced(batched, "topK = 40", "topK = 30"),
       "keepTopK = 40 > topK = 30: the plugin then writes no output at all", "BatchedNMSDynamic_TRT"},
      {"batched_share_mismatch", replaced(batched, "shareLocation = 1", "shareLocation = 0"), "shareLocation = 0 but boxes have 1 per anchor",
       "BatchedNMSDynamic_TRT"},
      {"batched_class_count", replaced(batched, "numClasses = 3", "numClasses = 4"), "scores have 3 classes, the node says 4",
       "BatchedNMSDynamic_TRT"},
      {"mmdeploy_keep_above_top_k", replaced(mm, "topk = -1", "topk = 10"),
       "keep_topk = 15 > the per-class top-K 10: the plugin then writes no output at all", "TRTBatchedNMS"},
      {"mmdeploy_negative_keep", replaced(replaced(mm, "keep_topk = 15", "keep_topk = -1"), "num_classes", "num_classes"),
       "keep_topk = -1 is negative", "TRTBatchedNMS"},
      {"mmdeploy_negative_score_threshold", replaced(mm, "score_threshold = 0.6", "score_threshold = -0.1"),
       "score threshold -0.1 is negative", "TRTBatchedNMS"},
  };
}

class NmsDecline : public ::testing::TestWithParam<Decline> {};

TEST_P(NmsDecline, LeavesTheNodeAndSaysWhy) {
  const Decline& d = GetParam();
  TempDir dir;
  const auto input = write_model_text(d.model, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--explain", d.op});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find(d.reason), std::string::npos) << result.out;
  EXPECT_EQ(count(read_model(dir / "out.onnx"), d.op), 1);
}

INSTANTIATE_TEST_SUITE_P(Forms, NmsDecline, ::testing::ValuesIn(declines()), [](const auto& info) { return info.param.name; });

// `inspect` names each plugin with its rule (custom domains); `check` names the node before.
TEST(NmsCli, InspectNamesTheRulesAndCheckNamesTheNodes) {
  TempDir dir;
  for (const auto& [model, op, rule] :
       {std::tuple{Efficient{.name = "e"}.model(), std::string("TRT.EfficientNMS_TRT"), std::string("efficient-nms-trt [onnx, ort]")},
        {Batched{.name = "b", .domain = "TRT"}.model(), "TRT.BatchedNMSDynamic_TRT", "batched-nms-trt [onnx, ort]"},
        {Mmdeploy{.name = "m"}.model(), "mmdeploy.TRTBatchedNMS", "mmdeploy-trt-batched-nms [onnx, ort]"}}) {
    const auto input = write_model_text(model, dir / "in.onnx");
    const auto inspect = run_cli({"inspect", input.string()});
    EXPECT_NE(inspect.out.find(op + " x1: " + rule), std::string::npos) << inspect.out;
    const auto check = run_cli({"check", input.string(), "--target", "onnx"});
    EXPECT_EQ(check.exit_code, 1) << check.out;
    EXPECT_NE(check.out.find(op), std::string::npos) << check.out;
  }
}

// The graphsurgeon form sits in the default domain: `check` names it as an op standard ONNX
// doesn't have; the rewrite replaces it.
TEST(NmsCli, DefaultDomainPluginIsCheckedAndRewritten) {
  TempDir dir;
  const auto input = write_model_text(Efficient{.name = "e", .domain = "", .opset = 13}.model(), dir / "in.onnx");
  const auto check = run_cli({"check", input.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1) << check.out;
  EXPECT_NE(check.out.find("EfficientNMS_TRT"), std::string::npos) << check.out;
  EXPECT_TRUE(rewritten(input, dir / "out.onnx"));
}

}  // namespace
}  // namespace onnx_rewrite
