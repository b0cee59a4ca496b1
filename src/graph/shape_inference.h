// Works out ShapeFacts on demand, back through the producers a query needs (iteratively, so a
// deep graph can't exhaust the stack), remembering them for the scope's lifetime (one round: the
// graph does not change while a scope is in use). Owned by Scope, reached through Scope::facts.
#pragma once

#include <memory>
#include <string_view>

#include "graph/scope.h"
#include "onnx_rewrite/shapes.h"

namespace onnx_rewrite {

class ShapeInference {
 public:
  ShapeInference(const Scope& scope, Scope::Reader reader);
  ~ShapeInference();
  const ShapeFacts& operator()(std::string_view value);

 private:
  class Worker;
  // What the graph declares of a value (Scope keeps it private to everyone else).
  static Scope::Declared declared(const Scope& scope, std::string_view value) { return scope.declared(value); }
  static Scope::Declared declared_here(const Scope& scope, std::string_view value) { return scope.declared_here(value); }
  std::unique_ptr<Worker> worker_;
};

}  // namespace onnx_rewrite
