// TensorRT's NMS plugins as exporters write them into ONNX (trt-nms.rules): EfficientNMS_TRT,
// BatchedNMS_TRT / BatchedNMSDynamic_TRT and mmdeploy's TRTBatchedNMS, as NonMaxSuppression +
// TopK + Gather + padding to the plugin's fixed output layout.
//
// The shared skeleton, per image b:
//   1. the scores each class's NonMaxSuppression sees: background class and (BatchedNMS) scores
//      outside the per-class top-K, or (EfficientNMS) elements outside the per-image 5000 best,
//      set to the lowest float ("nothing": below every threshold);
//   2. NonMaxSuppression with the plugin's thresholds (EfficientNMS compares with >=, ONNX with >:
//      its thresholds move down one float, so that s >= t <=> s > nextafter(t, -inf) exactly);
//   3. the selected scores scattered into a dense [B, positions] tensor of nothing, at the position
//      that orders ties as the plugin does (EfficientNMS: element n*C + c; BatchedNMS: class-major
//      c*N + n, then rank), padded with max-output columns of nothing;
//   4. TopK of the max output count: sorted by score, ties to the lower position; valid = above nothing;
//   5. the outputs gathered from the positions, padding where not valid.
// Boxes go to NonMaxSuppression exactly as the plugin compares them (EfficientNMS: corner boxes
// after its arithmetic swap; BatchedNMS with Caffe semantics: max corners + 1; TRTBatchedNMS:
// reversed boxes made empty, as the plugin's IoU of such a box is 0); the outputs carry the boxes
// as the plugin writes them.
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;
constexpr int32_t kFloat = TensorProto::FLOAT;
constexpr int32_t kInt64 = TensorProto::INT64;
constexpr int32_t kInt32 = TensorProto::INT32;
// "Nothing here": below every score a threshold lets through (the ONNX text format can't spell -inf).
constexpr double kNone = std::numeric_limits<float>::lowest();

// ---- Reading the plugin's attributes ----------------------------------------------------------

// A number attribute as the TensorRT ONNX parser hands it to a plugin: INT, FLOAT, or a
// one-element INTS/FLOATS (yolov7 writes background_class and box_coding as 1-tuples).
std::optional<double> number(const onnx::NodeProto& node, std::string_view name) {
  const onnx::AttributeProto* a = find_attribute(node, name);
  if (!a) return std::nullopt;
  switch (a->type()) {
    case onnx::AttributeProto::INT: return static_cast<double>(a->i());
    case onnx::AttributeProto::FLOAT: return a->f();
    case onnx::AttributeProto::INTS:
      if (a->ints_size() == 1) return static_cast<double>(a->ints(0));
      break;
    case onnx::AttributeProto::FLOATS:
      if (a->floats_size() == 1) return a->floats(0);
      break;
    default: break;
  }
  return std::nullopt;
}

struct Attribute {
  const char* name;
  std::optional<double> fallback;  // nullopt: required
  bool integral = true;
};

// Reads `attributes` of the node into `values` (in order); a reason when one is missing, not a
// number or (integral ones) not a whole number.
std::string read_attributes(const onnx::NodeProto& node, const std::vector<Attribute>& attributes, std::vector<double>& values) {
  for (const Attribute& a : attributes) {
    auto value = number(node, a.name);
    if (!value && find_attribute(node, a.name)) return fmt::format("attribute {} is not a number (or a one-element list)", a.name);
    if (!value && !a.fallback) return fmt::format("attribute {} is missing (the plugin requires it)", a.name);
    if (!value) value = a.fallback;
    if (a.integral && *value != std::floor(*value)) return fmt::format("attribute {} = {} is not a whole number", a.name, *value);
    values.push_back(*value);
  }
  return {};
}

// The largest float below t: x >= t <=> x > below(t) for every float x. For t = 0 the smallest
// normal float (-FLT_MIN) instead of the denormal -1e-45, which a runtime flushing denormals
// would read as 0 (only negative denormal scores, which such runtimes read as 0, then differ).
float below(float t) {
  if (t == 0) return -std::numeric_limits<float>::min();
  return std::nextafter(t, -std::numeric_limits<float>::infinity());
}

// ---- Sizes, static or computed ----------------------------------------------------------------

class Dim {
 public:
  Dim() = default;
  Dim(GraphBuilder& b, int64_t known, Value shape_of, int64_t axis) : b_(&b), known_(known), shape_of_(shape_of), axis_(axis) {}
  bool known() const { return known_ >= 0; }
  int64_t value() const { return known_; }
  Value scalar() {
    if (known()) return b_->scalar(static_cast<double>(known_), kInt64);
    if (scalar_.absent()) {
      const Value shape = b_->Shape(shape_of_);
      scalar_ = b_->Gather(shape, b_->scalar(static_cast<double>(axis_), kInt64));
    }
    return scalar_;
  }
  Value vector() { return known() ? b_->ints({known_}) : b_->Unsqueeze(scalar(), {0}); }

 private:
  GraphBuilder* b_ = nullptr;
  int64_t known_ = -1;
  Value shape_of_;
  int64_t axis_ = 0;
  Value scalar_;
};

// min(a, b) of int64 scalars (Min takes integers only from opset 12).
Value min_int(GraphBuilder& b, Value x, Value y) { return b.Where(b.op("Less", {x, y}), x, y); }

Value product(GraphBuilder& b, Dim& x, Dim& y) {
  if (x.known() && y.known()) return b.scalar(static_cast<double>(x.value() * y.value()), kInt64);
  const Value first = x.scalar();
  return b.Mul(first, y.scalar());
}

// ---- Pieces ---------------------------------------------------------------------------------

// Columns k of sel [K, 3] as [K, 1].
std::vector<Value> columns(GraphBuilder& b, Value selected) { return b.Split(selected, 1, {1, 1, 1}); }

// A float tensor of kNone of the given shape.
Value nothing(GraphBuilder& b, Value shape) {
  return b.op("ConstantOfShape", {shape}, {attr("value", make_tensor(kFloat, {1}, {kNone}))});
}

// Score where class != background, nothing there (scores [B, N, C]; no-op for background < 0).
Value without_background(GraphBuilder& b, Value scores, int64_t background, Dim& classes) {
  if (background < 0 || (classes.known() && background >= classes.value())) return scores;
  const Value ids = b.op("Range", {b.scalar(0, kInt64), classes.scalar(), b.scalar(1, kInt64)});
  const Value is_background = b.op("Equal", {ids, b.scalar(static_cast<double>(background), kInt64)});
  return b.Where(is_background, b.scalar(kNone, kFloat), scores);
}

// Keeps the `k` largest values of `x` along `axis` (ties: lower index), nothing elsewhere.
Value keep_top(GraphBuilder& b, Value x, Value k_vector, int64_t axis) {
  const std::vector<Value> top = b.op_outputs("TopK", {x, k_vector}, 2, {attr("axis", axis)});
  return b.op("ScatterElements", {nothing(b, b.Shape(x)), top[1], top[0]}, {attr("axis", axis)});
}

struct Ranked {
  Value values;   // [B, M] sorted scores, kNone where no detection
  Value indices;  // [B, M] positions, 0 where no detection
  Value valid;    // [B, M] bool
};

// Steps 3 and 4: the selected scores `updates` [K] at flat positions `flat` [K, 1] of a
// [B, per_image] tensor of nothing, padded with `count` columns of nothing, and its TopK(count).
Ranked rank(GraphBuilder& b, Value flat, Value updates, Dim& batch, Value per_image, int64_t count) {
  const Value total = b.Mul(batch.scalar(), per_image);
  Value dense = b.op("ScatterND", {nothing(b, b.Unsqueeze(total, {0})), flat, updates});
  dense = b.Reshape(dense, b.Concat({batch.vector(), b.Unsqueeze(per_image, {0})}, 0));
  const Value padding = nothing(b, b.Concat({batch.vector(), b.ints({count})}, 0));
  const Value padded = b.Concat({dense, padding}, 1);  // TopK needs count columns, however few positions
  const std::vector<Value> top = b.op_outputs("TopK", {padded, b.ints({count})}, 2, {attr("axis", int64_t{1})});
  Ranked ranked;
  ranked.values = top[0];
  ranked.valid = b.op("Greater", {top[0], b.scalar(kNone, kFloat)});
  ranked.indices = b.Where(ranked.valid, top[1], b.scalar(0, kInt64));
  return ranked;
}

// Batch index of each output row, [B, 1].
Value batch_column(GraphBuilder& b, Dim& batch) {
  return b.Unsqueeze(b.op("Range", {b.scalar(0, kInt64), batch.scalar(), b.scalar(1, kInt64)}), {1});
}

// rows [B, M] of table [rows, 4] -> [B, M, 4].
Value gather_rows(GraphBuilder& b, Value table, Value rows) { return b.Gather(b.Reshape(table, b.ints({-1, 4})), rows, 0); }

// `value` for graph output `name` (a pattern output): cast to its declared element type when
// that differs from what the plugin makes (mmdeploy declares labels as the traced int64).
void output(const Match& match, GraphBuilder& b, const std::string& pattern_name, Value value, int32_t made) {
  if (!match.has_value(pattern_name) || match.value(pattern_name).empty()) return;
  const int32_t declared = match.facts(pattern_name).elem_type;
  if (declared != 0 && declared != made) value = b.Cast(value, declared);
  b.output(match.value(pattern_name), value);
}

// Reshapes num_detections [B, 1] to [B] when the graph declares it rank 1.
Value count_shape(const Match& match, GraphBuilder& b, const std::string& pattern_name, Value count) {
  if (!match.has_value(pattern_name) || match.value(pattern_name).empty()) return count;
  const auto rank = match.facts(pattern_name).rank();
  return rank && *rank == 1 ? b.Reshape(count, b.ints({-1})) : count;
}

// a > c (per pair of corners): BoxCorner::reorder's arithmetic swap (a = a - c; c = a + c;
// a = c - a), which rounds; pairs given as [..., 2] tensors of the first and second corner.
void arithmetic_reorder(GraphBuilder& b, Value& first, Value& second) {
  const Value swap = b.op("Greater", {first, second});
  const Value t = b.Sub(first, second);
  const Value new_second = b.Add(t, second);
  const Value new_first = b.Sub(new_second, t);
  first = b.Where(swap, new_first, first);
  second = b.Where(swap, new_second, second);
}

std::string check_float(const Match& match, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!match.has_value(name) || match.value(name).empty()) continue;
    const int32_t type = match.facts(name).elem_type;
    if (type == 0) return fmt::format("the element type of {} is unknown", name);
    if (type != kFloat) return fmt::format("{} is {}: ONNX NonMaxSuppression takes float only", name, data_type_name(type));
  }
  return {};
}

// scores [B, N, C] or [B, N, C, 1] -> [B, N, C].
std::string scores3(const Match& match, GraphBuilder& b, Value& scores) {
  const auto rank = match.facts("scores").rank();
  if (!rank) return "the rank of scores is unknown";
  if (*rank == 4) {
    if (match.facts("scores").dim(3) != 1) return "scores of rank 4 must be [B, N, C, 1]";
    scores = b.Squeeze(scores, {3});
  } else if (*rank != 3) {
    return fmt::format("scores has rank {}, the plugin takes [B, N, C] (or [B, N, C, 1])", *rank);
  }
  return {};
}

// ---- EfficientNMS_TRT -----------------------------------------------------------------------

constexpr int64_t kEfficientNmsCandidates = 5000;  // numSelectedBoxes on regsPerBlock >= 65536 GPUs

std::string build_efficient_nms(const Match& match, GraphBuilder& b) {
  std::vector<double> v;
  if (auto why = read_attributes(*match.anchor,
                                 {{"score_threshold", std::nullopt, false}, {"iou_threshold", std::nullopt, false},
                                  {"max_output_boxes", std::nullopt}, {"background_class", std::nullopt},
                                  {"score_activation", std::nullopt}, {"box_coding", std::nullopt}, {"class_agnostic", 0.0}},
                                 v);
      !why.empty()) {
    return why;
  }
  const float score_threshold = static_cast<float>(v[0]), iou_threshold = static_cast<float>(v[1]);
  const int64_t max_boxes = static_cast<int64_t>(v[2]), background = static_cast<int64_t>(v[3]);
  const bool activation = v[4] != 0, center_size = v[5] != 0, agnostic = v[6] != 0;
  if (score_threshold < 0) return fmt::format("score_threshold = {} is negative (the plugin refuses it)", score_threshold);
  if (!(iou_threshold > 0)) return fmt::format("iou_threshold = {} is not positive (the plugin refuses it)", iou_threshold);
  if (max_boxes <= 0) return fmt::format("max_output_boxes = {} is not positive", max_boxes);
  for (const auto& [name, value] : {std::pair{"score_activation", v[4]}, {"box_coding", v[5]}, {"class_agnostic", v[6]}}) {
    if (value != 0 && value != 1) return fmt::format("{} = {} is not 0 or 1", name, value);
  }
  if (auto why = check_float(match, {"boxes", "scores", "anchors"}); !why.empty()) return why;

  Value boxes{match.value("boxes")}, scores{match.value("scores")};
  if (auto why = scores3(match, b, scores); !why.empty()) return why;
  const ShapeFacts& scores_facts = match.facts("scores");
  Dim batch(b, scores_facts.dim(0), scores, 0), anchors_count(b, scores_facts.dim(1), scores, 1),
      classes(b, scores_facts.dim(2), scores, 2);

  // Boxes: shared [B, N, 4] (also given as [B, N, 1, 4]) or per class [B, N, C, 4].
  const auto box_rank = match.facts("boxes").rank();
  if (!box_rank || (*box_rank != 3 && *box_rank != 4)) return "boxes must be [B, N, 4], [B, N, 1, 4] or [B, N, C, 4]";
  bool per_class = false;
  if (*box_rank == 4) {
    const int64_t locations = match.facts("boxes").dim(2);
    if (locations < 0) return "boxes [B, N, ?, 4]: whether they are shared (1) or per class (C) is unknown";
    per_class = locations != 1;
    if (per_class && classes.known() && locations != classes.value()) {
      return fmt::format("boxes have {} per anchor, scores {} classes", locations, classes.value());
    }
    if (!per_class) boxes = b.Squeeze(boxes, {2});
  }

  // The fused box decoder: box and anchor reordered (corner coding), then decoded.
  auto split_pairs = [&](Value x) { return b.Split(x, -1, {2, 2}); };
  if (match.has_value("anchors") && !match.value("anchors").empty()) {
    if (const auto rank = match.facts("anchors").rank(); !rank || *rank != 3) return "anchors must be [1, N, 4] or [B, N, 4]";
    Value anchors{match.value("anchors")};
    if (per_class) anchors = b.Unsqueeze(anchors, {2});
    auto box_pairs = split_pairs(boxes), anchor_pairs = split_pairs(anchors);
    if (!center_size) {
      arithmetic_reorder(b, box_pairs[0], box_pairs[1]);
      arithmetic_reorder(b, anchor_pairs[0], anchor_pairs[1]);
      boxes = b.Concat({b.Add(box_pairs[0], anchor_pairs[0]), b.Add(box_pairs[1], anchor_pairs[1])}, -1);
    } else {
      // (b0*a2 + a0, b1*a3 + a1, a2*exp(b2), a3*exp(b3))
      const Value centers = b.Add(b.Mul(box_pairs[0], anchor_pairs[1]), anchor_pairs[0]);
      const Value sizes = b.Mul(anchor_pairs[1], b.op("Exp", {box_pairs[1]}));
      boxes = b.Concat({centers, sizes}, -1);
    }
  }
  // Corner boxes as the plugin writes them (center-size converted: c -/+ s * 0.5).
  if (center_size) {
    const auto pairs = split_pairs(boxes);
    const Value half = b.Mul(pairs[1], b.scalar(0.5, kFloat));
    boxes = b.Concat({b.Sub(pairs[0], half), b.Add(pairs[0], half)}, -1);
  }
  // As the plugin's IOU() compares them: reordered by its arithmetic swap.
  Value compared;
  {
    auto pairs = split_pairs(boxes);
    arithmetic_reorder(b, pairs[0], pairs[1]);
    compared = b.Concat({pairs[0], pairs[1]}, -1);
  }

  // Candidates: background nothing; only the 5000 best elements of each image.
  const Value elements = product(b, anchors_count, classes);
  Value candidates = without_background(b, scores, background, classes);
  const bool capped = !(anchors_count.known() && classes.known() && anchors_count.value() * classes.value() <= kEfficientNmsCandidates);
  if (capped) {
    const Value flat = b.Reshape(candidates, b.Concat({batch.vector(), b.Unsqueeze(elements, {0})}, 0));
    const Value k = anchors_count.known() && classes.known()
                        ? b.ints({kEfficientNmsCandidates})
                        : b.Unsqueeze(min_int(b, elements, b.scalar(static_cast<double>(kEfficientNmsCandidates), kInt64)), {0});
    const Value kept = keep_top(b, flat, k, 1);
    candidates = b.Reshape(kept, b.Shape(candidates));
  }
  // Thresholds: the plugin keeps score >= t (raw >= logf(t / (1 - t)) with score_activation) and
  // drops IoU >= t; NonMaxSuppression keeps score > t' and drops IoU > t'.
  float raw_threshold = score_threshold;
  if (activation) raw_threshold = score_threshold <= 0 ? -32768.f : std::log(score_threshold / (1.f - score_threshold));
  const Value score_below = b.scalar(below(raw_threshold), kFloat);
  const Value iou_below = b.scalar(iou_threshold > 1 ? 1.f : below(iou_threshold), kFloat);
  const Value max_per_class = b.ints({max_boxes});

  Value flat_position, updates;  // [K, 1] position (b*N + n)*C + c, [K] score
  if (agnostic) {
    // One class: every element (n, c) with its box, suppressed across classes.
    Value element_boxes = per_class ? compared : b.op("Expand", {b.Unsqueeze(compared, {2}), b.Concat({batch.vector(), anchors_count.vector(), classes.vector(), b.ints({4})}, 0)});
    element_boxes = b.Reshape(element_boxes, b.Concat({batch.vector(), b.ints({-1, 4})}, 0));
    const Value element_scores = b.Reshape(candidates, b.Concat({batch.vector(), b.ints({1, -1})}, 0));
    const Value selected = b.op("NonMaxSuppression", {element_boxes, element_scores, max_per_class, iou_below, score_below});
    const auto cols = columns(b, selected);
    flat_position = b.Add(b.Mul(cols[0], elements), cols[2]);
    updates = b.op("GatherND", {element_scores, selected});
  } else if (!per_class) {
    const Value class_scores = b.Transpose(candidates, {0, 2, 1});  // [B, C, N]
    const Value selected = b.op("NonMaxSuppression", {compared, class_scores, max_per_class, iou_below, score_below});
    const auto cols = columns(b, selected);
    const Value anchor_major = b.Add(b.Mul(cols[0], anchors_count.scalar()), cols[2]);
    flat_position = b.Add(b.Mul(anchor_major, classes.scalar()), cols[1]);
    updates = b.op("GatherND", {class_scores, selected});
  } else {
    // Each (image, class) its own batch of boxes: [B*C, N, 4] and scores [B*C, 1, N].
    const Value boxes_by_class = b.Transpose(compared, {0, 2, 1, 3});
    const Value class_boxes = b.Reshape(boxes_by_class, b.Concat({b.ints({-1}), anchors_count.vector(), b.ints({4})}, 0));
    const Value scores_by_class = b.Transpose(candidates, {0, 2, 1});
    const Value class_scores = b.Reshape(scores_by_class, b.Concat({b.ints({-1, 1}), anchors_count.vector()}, 0));
    const Value selected = b.op("NonMaxSuppression", {class_boxes, class_scores, max_per_class, iou_below, score_below});
    const auto cols = columns(b, selected);
    const Value image = b.Div(cols[0], classes.scalar()), klass = b.op("Mod", {cols[0], classes.scalar()});
    const Value anchor_major = b.Add(b.Mul(image, anchors_count.scalar()), cols[2]);
    flat_position = b.Add(b.Mul(anchor_major, classes.scalar()), klass);
    updates = b.op("GatherND", {class_scores, selected});
  }
  Ranked ranked = rank(b, flat_position, updates, batch, elements, max_boxes);

  // Outputs: boxes of the chosen elements, scores (sigmoid with score_activation), classes; 0 padding.
  const Value zero = b.scalar(0, kFloat);
  const Value images = batch_column(b, batch);
  Value rows;
  if (per_class) {
    rows = b.Add(b.Mul(images, elements), ranked.indices);
  } else {
    const Value image_rows = b.Mul(images, anchors_count.scalar());
    rows = b.Add(image_rows, b.Div(ranked.indices, classes.scalar()));
  }
  const Value chosen_boxes = gather_rows(b, boxes, rows);
  const Value count = b.Reduce("ReduceSum", b.Cast(ranked.valid, kInt32), {1}, true);
  output(match, b, "num_detections", count_shape(match, b, "num_detections", count), kInt32);
  output(match, b, "detection_boxes", b.Where(b.Unsqueeze(ranked.valid, {2}), chosen_boxes, zero), kFloat);
  output(match, b, "detection_scores", b.Where(ranked.valid, activation ? b.Sigmoid(ranked.values) : ranked.values, zero), kFloat);
  const Value chosen_classes = b.Cast(b.op("Mod", {ranked.indices, classes.scalar()}), kInt32);
  output(match, b, "detection_classes", b.Where(ranked.valid, chosen_classes, b.scalar(0, kInt32)), kInt32);
  return {};
}

// ---- BatchedNMS_TRT, BatchedNMSDynamic_TRT, mmdeploy TRTBatchedNMS ------------------------------

enum class Variant { kTensorRT, kMmdeploy };

struct Batched {
  bool share_location = true, clip = true, normalized = true, caffe = true, return_index = false;
  int64_t background = -1, classes = -1, top_k = -1, keep_top_k = 0;
  float score_threshold = 0, iou_threshold = 0;
};

std::string parse_batched(const Match& match, Variant variant, Batched& p) {
  std::vector<double> v;
  const onnx::NodeProto& node = *match.anchor;
  if (variant == Variant::kTensorRT) {
    if (!find_attribute(node, "isNormalized")) {
      return "isNormalized is absent: the plugin leaves it uninitialized (its README says true, its header false)";
    }
    if (auto why = read_attributes(node,
                                   {{"shareLocation", std::nullopt}, {"backgroundLabelId", std::nullopt}, {"numClasses", std::nullopt},
                                    {"topK", std::nullopt}, {"keepTopK", std::nullopt}, {"scoreThreshold", std::nullopt, false},
                                    {"iouThreshold", std::nullopt, false}, {"isNormalized", std::nullopt}, {"clipBoxes", 1.0},
                                    {"caffeSemantics", 1.0}},
                                   v);
        !why.empty()) {
      return why;
    }
    p.share_location = v[0] != 0, p.background = static_cast<int64_t>(v[1]), p.classes = static_cast<int64_t>(v[2]);
    p.top_k = static_cast<int64_t>(v[3]), p.keep_top_k = static_cast<int64_t>(v[4]);
    p.score_threshold = static_cast<float>(v[5]), p.iou_threshold = static_cast<float>(v[6]);
    p.normalized = v[7] != 0, p.clip = v[8] != 0, p.caffe = v[9] != 0;
    if (p.top_k > 4096) return fmt::format("topK = {} exceeds the plugin's limit of 4096 (it refuses the node)", p.top_k);
    if (p.top_k <= 0) return fmt::format("topK = {} is not positive", p.top_k);
    if (p.keep_top_k > p.top_k) {
      return fmt::format("keepTopK = {} > topK = {}: the plugin then writes no output at all", p.keep_top_k, p.top_k);
    }
    if (!p.normalized && !p.caffe) {
      return "isNormalized = 0 with caffeSemantics = 0: the plugin's IoU takes a plain intersection over areas with + 1, "
             "which NonMaxSuppression can't compute";
    }
  } else {
    if (auto why = read_attributes(node,
                                   {{"background_label_id", -1.0}, {"num_classes", std::nullopt}, {"topk", -1.0},
                                    {"keep_topk", std::nullopt}, {"score_threshold", std::nullopt, false},
                                    {"iou_threshold", std::nullopt, false}, {"is_normalized", 0.0}, {"clip_boxes", 1.0},
                                    {"return_index", 0.0}},
                                   v);
        !why.empty()) {
      return why;
    }
    p.background = static_cast<int64_t>(v[0]), p.classes = static_cast<int64_t>(v[1]), p.top_k = static_cast<int64_t>(v[2]);
    p.keep_top_k = static_cast<int64_t>(v[3]), p.score_threshold = static_cast<float>(v[4]);
    p.iou_threshold = static_cast<float>(v[5]), p.clip = v[7] != 0, p.return_index = v[8] != 0;
    if (p.keep_top_k < 0) return fmt::format("keep_topk = {} is negative (the plugin's outputs would have a negative size)", p.keep_top_k);
  }
  if (p.keep_top_k == 0) return "keepTopK = 0: no output";
  if (p.score_threshold < 0) {
    return fmt::format("score threshold {} is negative: the plugin ranks valid negative scores below the suppressed ones (0)",
                       p.score_threshold);
  }
  if (p.iou_threshold < 0) return fmt::format("iou threshold {} is negative", p.iou_threshold);
  return {};
}

std::string build_batched_nms(const Match& match, GraphBuilder& b, Variant variant) {
  Batched p;
  if (auto why = parse_batched(match, variant, p); !why.empty()) return why;
  if (auto why = check_float(match, {"boxes", "scores"}); !why.empty()) return why;
  Value boxes{match.value("boxes")}, scores{match.value("scores")};
  if (auto why = scores3(match, b, scores); !why.empty()) return why;
  const ShapeFacts &scores_facts = match.facts("scores"), &box_facts = match.facts("boxes");
  Dim batch(b, scores_facts.dim(0), scores, 0), anchors_count(b, scores_facts.dim(1), scores, 1),
      classes(b, scores_facts.dim(2), scores, 2);
  if (classes.known() && classes.value() != p.classes) {
    return fmt::format("scores have {} classes, the node says {}", classes.value(), p.classes);
  }
  if (!box_facts.rank() || *box_facts.rank() != 4) {
    return "boxes must be [B, N, 1, 4] or [B, N, C, 4] (the static plugin's implicit-batch [N, L, 4] is not supported)";
  }
  const int64_t locations = box_facts.dim(2);
  if (locations < 0) return "boxes [B, N, ?, 4]: whether they are shared (1) or per class (C) is unknown";
  const bool per_class = locations != 1;
  if (variant == Variant::kTensorRT && per_class == p.share_location) {
    return fmt::format("shareLocation = {} but boxes have {} per anchor", p.share_location ? 1 : 0, locations);
  }
  if (per_class && locations != p.classes) return fmt::format("boxes have {} per anchor, numClasses is {}", locations, p.classes);

  // Per-class top-K: TensorRT's topK as given (it reads at most N), mmdeploy's topk if 0 < topk <= N, else N.
  const int64_t keep = p.keep_top_k;
  int64_t static_top_k = variant == Variant::kTensorRT || p.top_k > 0 ? p.top_k : -1;  // -1: N
  if (anchors_count.known() && static_top_k >= anchors_count.value()) static_top_k = -1;
  if (variant == Variant::kMmdeploy) {
    // The plugin writes nothing when keep_topk exceeds its per-class top-K (topk, or N).
    const int64_t effective = static_top_k >= 0 ? static_top_k : anchors_count.value();
    if (effective >= 0 && keep > effective) {
      return fmt::format("keep_topk = {} > the per-class top-K {}: the plugin then writes no output at all", keep, effective);
    }
    if (!anchors_count.known()) {
      b.note("when there are fewer boxes than keep_topk at run time, TRTBatchedNMS writes no output at all; the rewrite pads");
    }
  }

  // Boxes as the plugin compares them.
  Value compared = boxes;
  if (variant == Variant::kTensorRT && !p.normalized) {
    // Caffe semantics: widths and heights + 1 -> the max corners + 1 (after the min/max reorder).
    const auto pairs = b.Split(boxes, -1, {2, 2});
    const Value low = b.op("Min", {pairs[0], pairs[1]});
    const Value high = b.op("Max", {pairs[0], pairs[1]});
    compared = b.Concat({low, b.Add(high, b.scalar(1, kFloat))}, -1);
    b.note("isNormalized = 0 (Caffe IoU, + 1 on widths and heights) is reproduced for overlapping and touching boxes; "
           "for boxes apart (by any gap) the plugin's IoU is 1 / (area1 + area2 - 1), NonMaxSuppression's 0: they differ "
           "only where that exceeds the IoU threshold (boxes of a few pixels)");
  } else if (variant == Variant::kMmdeploy) {
    // mmdeploy doesn't reorder: a box with x2 < x1 or y2 < y1 overlaps nothing. An empty box does
    // the same in NonMaxSuppression.
    const auto pairs = b.Split(boxes, -1, {2, 2});
    const Value reversed = b.op("Not", {b.op("Equal", {b.op("Max", {pairs[0], pairs[1]}), pairs[1]})});  // any x1 > x2 or y1 > y2
    const Value either = b.Cast(b.Reduce("ReduceMax", b.Cast(reversed, kFloat), {-1}, true), TensorProto::BOOL);
    compared = b.Where(either, b.scalar(0, kFloat), boxes);
  }

  // Scores: background nothing, then each class's top-K.
  Value class_scores = b.Transpose(without_background(b, scores, p.background, classes), {0, 2, 1});  // [B, C, N]
  if (static_top_k >= 0) {
    const Value top = b.scalar(static_cast<double>(static_top_k), kInt64);
    const Value k = b.Unsqueeze(anchors_count.known() ? top : min_int(b, top, anchors_count.scalar()), {0});
    class_scores = keep_top(b, class_scores, k, 2);
  }
  const Value score_threshold = b.scalar(p.score_threshold, kFloat);
  const Value iou_threshold = b.scalar(std::min(p.iou_threshold, 1.f), kFloat);
  const Value max_per_class = b.ints({keep});
  Value selected, nms_scores;
  if (!per_class) {
    nms_scores = class_scores;
    selected = b.op("NonMaxSuppression", {b.Squeeze(compared, {2}), nms_scores, max_per_class, iou_threshold, score_threshold});
  } else {
    const Value boxes_by_class = b.Transpose(compared, {0, 2, 1, 3});
    const Value class_boxes = b.Reshape(boxes_by_class, b.Concat({b.ints({-1}), anchors_count.vector(), b.ints({4})}, 0));
    nms_scores = b.Reshape(class_scores, b.Concat({b.ints({-1, 1}), anchors_count.vector()}, 0));
    selected = b.op("NonMaxSuppression", {class_boxes, nms_scores, max_per_class, iou_threshold, score_threshold});
  }
  // Position (b*C + c)*N + n: class-major per image, ties in class then rank (= box index).
  const auto cols = columns(b, selected);
  const Value image_class = per_class ? cols[0] : b.Add(b.Mul(cols[0], classes.scalar()), cols[1]);
  const Value flat = b.Add(b.Mul(image_class, anchors_count.scalar()), cols[2]);
  const Value selected_scores = b.op("GatherND", {nms_scores, selected});
  Ranked ranked = rank(b, flat, selected_scores, batch, product(b, classes, anchors_count), keep);

  const Value klass = b.Div(ranked.indices, anchors_count.scalar());
  const Value anchor = b.op("Mod", {ranked.indices, anchors_count.scalar()});
  const Value images = batch_column(b, batch);
  const Value image_anchor = b.Add(b.Mul(images, anchors_count.scalar()), anchor);
  const Value rows = per_class ? b.Add(b.Mul(image_anchor, classes.scalar()), klass) : image_anchor;
  Value chosen = gather_rows(b, boxes, rows);
  if (p.clip) chosen = b.Clip(chosen, 0.0, 1.0, kFloat);
  const Value valid4 = b.Unsqueeze(ranked.valid, {2});
  const Value zero = b.scalar(0, kFloat);
  const Value chosen_boxes = b.Where(valid4, chosen, zero);
  const Value chosen_scores = b.Where(ranked.valid, ranked.values, zero);
  if (variant == Variant::kTensorRT) {
    const Value count = b.Reduce("ReduceSum", b.Cast(ranked.valid, kInt32), {1}, true);
    output(match, b, "num_detections", count_shape(match, b, "num_detections", count), kInt32);
    output(match, b, "nmsed_boxes", chosen_boxes, kFloat);
    output(match, b, "nmsed_scores", chosen_scores, kFloat);
    const Value classes_as_float = b.Cast(klass, kFloat);
    output(match, b, "nmsed_classes", b.Where(ranked.valid, classes_as_float, b.scalar(-1, kFloat)), kFloat);
  } else {
    output(match, b, "dets", b.Concat({chosen_boxes, b.Unsqueeze(chosen_scores, {2})}, 2), kFloat);
    const Value minus_one = b.scalar(-1, kInt32);
    output(match, b, "labels", b.Where(ranked.valid, b.Cast(klass, kInt32), minus_one), kInt32);
    const Value index = per_class ? ranked.indices : anchor;
    output(match, b, "index", b.Where(ranked.valid, b.Cast(index, kInt32), minus_one), kInt32);
  }
  return {};
}

}  // namespace

void register_trt_nms_builders(BuilderRegistry& registry) {
  registry.add("efficient_nms_trt",
               {.values = {"boxes", "scores"},
                .optional_values = {"anchors", "num_detections", "detection_boxes", "detection_scores", "detection_classes"},
                .attributes = {},
                .optional_attributes = {}},
               build_efficient_nms);
  registry.add("batched_nms_trt",
               {.values = {"boxes", "scores"},
                .optional_values = {"num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"},
                .attributes = {},
                .optional_attributes = {}},
               [](const Match& match, GraphBuilder& b) { return build_batched_nms(match, b, Variant::kTensorRT); });
  registry.add("mmdeploy_trt_batched_nms",
               {.values = {"boxes", "scores"},
                .optional_values = {"dets", "labels", "index"},
                .attributes = {},
                .optional_attributes = {}},
               [](const Match& match, GraphBuilder& b) { return build_batched_nms(match, b, Variant::kMmdeploy); });
}

}  // namespace onnx_rewrite
