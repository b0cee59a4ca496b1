// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12) in opset-11 ops (below 11,
// GatherElements as the toolkit's flat Gather, for static dims)
// (lower-losses.rules), as their ONNX function bodies compute them (onnx/defs/math/defs.cc):
//
//   NLL: t = target as [N, 1, d...]; ignored = (t == ignore_index), read as class 0;
//        picked = GatherElements <axis = 1> (input, t), 0 where ignored; w = weight[t] (1 without
//        weight), 0 where ignored; loss = -picked · w as [N, d...];
//        none: loss; sum: ReduceSum (loss); mean: ReduceSum (loss) / ReduceSum (w)
//        (ReduceMean (loss) without weight and ignore_index).
//   SCE: log_prob = LogSoftmax over the class axis (C moved last, then back); NLL of it.
#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

std::string read_reduction(const BuildContext& match, std::string& reduction) {
  reduction = match.attribute_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return fmt::format("reduction '{}' is not none, sum or mean", reduction);
  }
  return {};
}

// The loss of `log_prob` ([N, C, d...], its dims if static) at the match's target and weight, as
// graph value `loss`.
BuildResult negative_log_likelihood(const BuildContext& match, GraphBuilder& b, Value log_prob,
                                    const std::optional<std::vector<int64_t>>& log_prob_dims, int32_t dtype) {
  std::string reduction;
  if (auto why = read_reduction(match, reduction); !why.empty()) return decline(why);
  if (auto why = check_element_type(dtype, {TensorProto::FLOAT, TensorProto::DOUBLE, TensorProto::FLOAT16}, "the loss")) return decline(*why);
  const Value target{match.value("target")};
  Value index = b.Unsqueeze(target, {1});  // [N, 1, d...]
  Value ignored;                           // bool [N, 1, d...]
  const auto* ignore_index = match.attribute("ignore_index");
  if (ignore_index) {
    const Value wide = b.Cast(index, TensorProto::INT64);
    ignored = b.op("Equal", {wide, b.ints({ignore_index->i()})});
    index = b.Where(ignored, b.Sub(index, index), index);
  }
  const Value zero = b.scalar(0, dtype);
  // Below 11 GatherElements is a Gather at positions from the static dims: [N, C, d...] and [N, 1, d...].
  auto index_dims = match.facts("target").static_dims();
  if (index_dims) index_dims->insert(index_dims->begin() + 1, 1);
  const auto gathered = gather_elements(b, log_prob, index, match.facts("target").elem_type, 1, log_prob_dims, index_dims);
  if (!gathered) return decline("below opset 11 the dims of the scores and the target must be static (GatherElements came at 11)");
  Value picked = *gathered;
  if (ignore_index) picked = b.Where(ignored, zero, picked);
  const Value loss_unweighted = b.Squeeze(b.op("Neg", {picked}), {1});  // [N, d...]
  Value weight;  // [N, d...], absent: every element weighs 1
  if (match.has("weight")) {
    weight = b.Gather(match.value("weight"), index);
    if (ignore_index) weight = b.Where(ignored, zero, weight);
    weight = b.Squeeze(weight, {1});
  } else if (ignore_index) {
    const Value one = b.scalar(1, dtype);
    weight = b.Where(b.Squeeze(ignored, {1}), zero, one);
  }
  const Value loss = weight.absent() ? loss_unweighted : b.Mul(loss_unweighted, weight);
  Value result = loss;
  if (reduction == "sum") {
    result = b.Reduce("ReduceSum", loss, {}, false);
  } else if (reduction == "mean") {
    if (weight.absent()) {
      result = b.Reduce("ReduceMean", loss, {}, false);
    } else {
      const Value total = b.Reduce("ReduceSum", loss, {}, false);
      result = b.Div(total, b.Reduce("ReduceSum", weight, {}, false));
    }
  }
  b.output(match.value("loss"), result);
  return built();
}

BuildResult lower_negative_log_likelihood(const BuildContext& match, GraphBuilder& b) {
  return negative_log_likelihood(match, b, match.value("input"), match.facts("input").static_dims(),
                                 match.element_type({"input", "weight"}));
}

// LogSoftmax over axis 1 of [N, C, d...]: as [N, C, D] with C last (opset 11's LogSoftmax
// normalizes the flattened trailing block; with C last that is C alone).
BuildResult lower_softmax_cross_entropy(const BuildContext& match, GraphBuilder& b) {
  const Value scores{match.value("scores")};
  const Value as_ncd = b.Reshape(scores, b.ints({0, 0, -1}));
  const Value as_ndc = b.Transpose(as_ncd, {0, 2, 1});
  const Value log_ndc = b.op("LogSoftmax", {as_ndc}, {attr("axis", int64_t{2})});
  const Value log_ncd = b.Transpose(log_ndc, {0, 2, 1});
  const Value log_prob = b.Reshape(log_ncd, b.Shape(scores));
  // Named last: the value takes the graph output's name, which the loss must not read before.
  const BuildResult result =
      negative_log_likelihood(match, b, log_prob, match.facts("scores").static_dims(), match.element_type({"scores", "weight"}));
  if (result.ok() && match.has("log_prob")) b.output(match.value("log_prob"), log_prob);
  return result;
}

}  // namespace

void register_lower_losses_builders(BuilderRegistry& registry) {
  registry.add("lower_negative_log_likelihood",
               {.values = {"input", "target", "loss"}, .optional_values = {"weight"}, .attributes = {},
                .optional_attributes = {"reduction", "ignore_index"}},
               lower_negative_log_likelihood);
  registry.add("lower_softmax_cross_entropy",
               {.values = {"scores", "target", "loss"}, .optional_values = {"weight", "log_prob"}, .attributes = {},
                .optional_attributes = {"reduction", "ignore_index"}},
               lower_softmax_cross_entropy);
}

}  // namespace onnx_rewrite
