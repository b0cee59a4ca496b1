// Model's methods: where an initializer header's payload lies in the source bytes, the full
// tensor decoded from there when a rule needs its values, and deleting initializers without
// leaving a stale entry behind.
#include "onnx_rewrite/model.h"

#include "io/wire.h"

namespace onnx_rewrite {

const FileRange* Model::deferred_field(const onnx::TensorProto& header) const {
  auto it = deferred_.find(&header);
  return it == deferred_.end() ? nullptr : &it->second;
}

onnx::TensorProto Model::tensor_with_data(const onnx::TensorProto& tensor) const {
  if (const auto* pieces = assembled_raw_data(tensor)) {
    onnx::TensorProto full = tensor;
    full.set_raw_data(source->read(*pieces));
    return full;
  }
  const FileRange* field = deferred_field(tensor);
  if (!field) return tensor;
  wire::FieldReader reader(source->data(), field->begin, field->end);
  wire::Field parsed;
  reader.next(parsed);
  onnx::TensorProto full;
  full.ParseFromArray(source->data() + parsed.payload_begin, static_cast<int>(parsed.payload_size()));
  return full;
}

bool Model::payload_elsewhere(const onnx::TensorProto& header) const {
  return deferred_.count(&header) != 0 || assembled_.count(&header) != 0;
}

size_t Model::tensor_size(const onnx::TensorProto& tensor) const {
  if (const FileRange* field = deferred_field(tensor)) return field->size();
  if (const auto* pieces = assembled_raw_data(tensor)) {
    size_t raw = 0;
    for (const FileRange& piece : *pieces) raw += piece.size();
    return tensor.ByteSizeLong() + wire::len_header(wire::kTensorRawData, raw).size() + raw;
  }
  return tensor.ByteSizeLong();
}

std::optional<FileRange> Model::raw_data_in_source(const onnx::TensorProto& header) const {
  const FileRange* field = deferred_field(header);
  if (!field) return std::nullopt;
  wire::FieldReader outer(source->data(), field->begin, field->end);
  wire::Field initializer;
  outer.next(initializer);
  wire::FieldReader reader(source->data(), initializer.payload_begin, initializer.end);
  wire::Field part;
  while (reader.next(part)) {
    if (part.number == wire::kTensorRawData && part.type == wire::WireType::kLen) return FileRange{part.payload_begin, part.end};
  }
  return std::nullopt;
}

void Model::assemble(const onnx::TensorProto& header, std::vector<FileRange> raw_data) { assembled_[&header] = std::move(raw_data); }

const std::vector<FileRange>* Model::assembled_raw_data(const onnx::TensorProto& header) const {
  auto it = assembled_.find(&header);
  return it == assembled_.end() ? nullptr : &it->second;
}

void Model::remove_initializers(onnx::GraphProto& graph, const std::function<bool(const onnx::TensorProto&)>& doomed) {
  auto& initializers = *graph.mutable_initializer();
  int kept = 0;
  for (int i = 0; i < initializers.size(); ++i) {
    if (doomed(initializers.Get(i))) {
      deferred_.erase(&initializers.Get(i));
      assembled_.erase(&initializers.Get(i));
    } else {
      initializers.SwapElements(i, kept++);
    }
  }
  initializers.DeleteSubrange(kept, initializers.size() - kept);
}

}  // namespace onnx_rewrite
