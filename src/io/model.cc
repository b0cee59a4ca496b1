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
  const FileRange* field = deferred_field(tensor);
  if (!field) return tensor;
  wire::FieldReader reader(source->data(), field->begin, field->end);
  wire::Field parsed;
  reader.next(parsed);
  onnx::TensorProto full;
  full.ParseFromArray(source->data() + parsed.payload_begin, static_cast<int>(parsed.payload_size()));
  return full;
}

void Model::remove_initializers(onnx::GraphProto& graph, const std::function<bool(const onnx::TensorProto&)>& doomed) {
  auto& initializers = *graph.mutable_initializer();
  int kept = 0;
  for (int i = 0; i < initializers.size(); ++i) {
    if (doomed(initializers.Get(i))) deferred_.erase(&initializers.Get(i));
    else initializers.SwapElements(i, kept++);
  }
  initializers.DeleteSubrange(kept, initializers.size() - kept);
}

}  // namespace onnx_rewrite
