// Model's methods: where an initializer header's payload lies in the source bytes, and the
// full tensor decoded from there when a rule needs its values.
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

}  // namespace onnx_rewrite
