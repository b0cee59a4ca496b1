// gen_op_history.cc -- print the per-operator version history of an ONNX
// domain, with the kind of change at every version step, by diffing
// consecutive schemas in the ONNX schema registry this program is linked with.
//
// With Debian's libonnx-dev 1.12 (registry: ai.onnx up to opset 17,
// ai.onnx.ml up to version 3) this prints the <=17 (resp. <=3) part of
// targets/ai.onnx.ops (resp. targets/ai.onnx.ml.ops); the later steps
// were added by hand from the ONNX docs (see the header of those files).
//
// Build (standalone, from the repository root; one line):
//   g++ -std=c++17 -O1 -DONNX_ML=1 -DONNX_NAMESPACE=onnx tools/gen_op_history.cc -o /tmp/gen_op_history -lonnx -lonnx_proto -lprotobuf -lpthread
// Run:
//   /tmp/gen_op_history [--domain ai.onnx|ai.onnx.ml] [--explain]
//     --domain   ai.onnx (default) or ai.onnx.ml
//     --explain  after each op line, print '#' comment lines describing
//                every difference found (for reviewing the classification)
//
// Output: one line per operator, sorted by name:
//   OpType  V1 V2:kind V3:kind ...
// Kinds (relative to the previous version of the same op):
//   types(t1,...)       only element types were added to some input/output
//   attr(name=default)  new optional attribute whose default keeps the old
//                       behaviour ('name=' with nothing after '=' if the
//                       attribute has no default value: absent == old)
//   input(k)            new optional trailing input k (0-based)
//   a+b                 combinations of the above
//   same                the schemas are identical (inputs, outputs,
//                       attributes and defaults, type sets)
//   deprecated          the schema is marked deprecated at this version
//   (no kind)           anything else: semantic/structural change
// NOTE: doc text is NOT compared; a step whose only change is in the
// documented semantics would come out as 'same', and a new attribute whose
// default does not actually reproduce the old behaviour as 'attr(...)'.  Every
// 'same' and 'attr' step was reviewed by hand against the registry's doc
// strings (op doc + attribute/input/output descriptions) and the ones that
// are not what the schema diff suggests are overridden in Overrides() below,
// which encodes that review so the output is reproducible.
#include <onnx/defs/schema.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using onnx::AttributeProto;
using onnx::OpSchema;
using onnx::OpSchemaRegistry;

namespace {

// Hand review of steps whose schema diff is empty or misleading but whose
// documented semantics changed (from onnx docs/Changelog.md).  Key is
// "Op:version", value is the kind to print instead ("" = plain, unsafe).
const std::map<std::string, std::string>& Overrides() {
  static const std::map<std::string, std::string> m = {
      // Steps whose schemas differ only in doc text, reviewed by hand (doc,
      // attribute and input/output descriptions diffed with this registry):
      //  - only accepted value ranges were widened (negative axes/indices,
      //    broadcasting, then/else shapes): a one-way relaxation, safe to raise
      //    across, lowered per node;
      {"ArgMax:11", "relaxed"}, {"ArgMin:11", "relaxed"}, {"Compress:11", "relaxed"}, {"Concat:11", "relaxed"},
      {"Flatten:11", "relaxed"}, {"Gather:11", "relaxed"}, {"Hardmax:11", "relaxed"}, {"LogSoftmax:11", "relaxed"},
      {"Softmax:11", "relaxed"}, {"OneHot:11", "relaxed"}, {"Scan:11", "relaxed"}, {"Slice:11", "relaxed"},
      {"Split:11", "relaxed"}, {"Squeeze:11", "relaxed"}, {"Unsqueeze:11", "relaxed"}, {"If:11", "relaxed"},
      {"ReduceL1:11", "relaxed"}, {"ReduceL2:11", "relaxed"}, {"ReduceLogSum:11", "relaxed"},
      {"ReduceLogSumExp:11", "relaxed"}, {"ReduceMax:11", "relaxed"}, {"ReduceMean:11", "relaxed"},
      {"ReduceMin:11", "relaxed"}, {"ReduceProd:11", "relaxed"}, {"ReduceSum:11", "relaxed"},
      {"ReduceSumSquare:11", "relaxed"}, {"Max:8", "relaxed"}, {"Mean:8", "relaxed"}, {"Min:8", "relaxed"},
      {"Sum:8", "relaxed"}, {"PRelu:7", "relaxed"},
      //  - an input or attribute became optional or was added with the old
      //    behaviour when absent (Gemm's C, Constant's sparse_value);
      {"Gemm:11", "relaxed"}, {"Constant:11", "relaxed"},
      //  - TopK-11 also allows negative axis (besides the new types/attributes);
      {"TopK:11", "relaxed"},
      //  - ConvTranspose-11 fixed the SAME_UPPER/SAME_LOWER pad split formula;
      {"ConvTranspose:11", ""},
      //  - bumped without any visible schema/doc difference (reason not
      //    verifiable from the schema: possibly function-body / semantics fix);
      {"NegativeLogLikelihoodLoss:13", ""}, {"NonMaxSuppression:11", ""},
      //  - RoiAlign-16: the new attribute's default (half_pixel) does NOT
      //    reproduce RoiAlign-10 behaviour (that is 'output_half_pixel').
      {"RoiAlign:16", ""},
      // Kept 'same' after review (doc-only clarifications of default
      // strides/dilations/auto_pad wording; onnx's version converter treats
      // these steps as compatible): Gemm:6, AveragePool:11, Conv:11, LpPool:11,
      // MaxPool:11, MaxUnpool:11.
  };
  return m;
}

std::string TypeName(const std::string& t) {
  // "tensor(float)" -> "float"; other type strings are kept verbatim.
  const std::string pre = "tensor(";
  if (t.compare(0, pre.size(), pre) == 0 && t.back() == ')') {
    std::string inner = t.substr(pre.size(), t.size() - pre.size() - 1);
    if (inner.find('(') == std::string::npos) return inner;
  }
  return t;
}

std::set<std::string> ParamTypes(const OpSchema::FormalParameter& p) {
  std::set<std::string> out;
  for (auto* t : p.GetTypes()) out.insert(*t);
  return out;
}

const char* OptName(OpSchema::FormalParameterOption o) {
  switch (o) {
    case OpSchema::Single: return "single";
    case OpSchema::Optional: return "optional";
    case OpSchema::Variadic: return "variadic";
  }
  return "?";
}

std::string AttrValue(const AttributeProto& a) {
  std::ostringstream os;
  switch (a.type()) {
    case AttributeProto::FLOAT: {
      char buf[64];
      snprintf(buf, sizeof buf, "%g", a.f());
      os << buf;
      break;
    }
    case AttributeProto::INT: os << a.i(); break;
    case AttributeProto::STRING: os << a.s(); break;
    case AttributeProto::INTS: {
      os << "[";
      for (int i = 0; i < a.ints_size(); ++i) os << (i ? "," : "") << a.ints(i);
      os << "]";
      break;
    }
    case AttributeProto::FLOATS: {
      os << "[";
      for (int i = 0; i < a.floats_size(); ++i) os << (i ? "," : "") << a.floats(i);
      os << "]";
      break;
    }
    case AttributeProto::STRINGS: {
      os << "[";
      for (int i = 0; i < a.strings_size(); ++i) os << (i ? "," : "") << a.strings(i);
      os << "]";
      break;
    }
    default: os << "<type " << a.type() << ">"; break;
  }
  return os.str();
}

bool HasDefault(const OpSchema::Attribute& a) { return a.default_value.has_type(); }

std::string DefaultKey(const OpSchema::Attribute& a) {
  if (!HasDefault(a)) return "<none>";
  AttributeProto c = a.default_value;
  c.clear_name();
  c.clear_doc_string();
  return c.SerializeAsString();
}

struct Diff {
  bool unsafe = false;            // some change not expressible as a kind
  bool deprecated = false;
  std::set<std::string> types;    // element types added
  std::vector<std::string> attrs; // "name=default"
  std::vector<int> inputs;        // new optional trailing inputs
  std::vector<std::string> notes; // human-readable explanation
};

// Partition of formal parameters by shared type variable: two params that
// are bound to the same type constraint must have equal types.  If a step
// splits or merges such groups the meaning of typing changes -> unsafe.
std::vector<std::vector<std::string>> Binding(const OpSchema& s, size_t nin, size_t nout) {
  std::map<std::string, std::vector<std::string>> by;
  std::set<std::string> tc;
  for (auto& c : s.typeConstraintParams()) tc.insert(c.type_param_str);
  for (size_t i = 0; i < nin && i < s.inputs().size(); ++i) {
    auto& p = s.inputs()[i];
    if (tc.count(p.GetTypeStr())) by[p.GetTypeStr()].push_back("i" + std::to_string(i));
  }
  for (size_t i = 0; i < nout && i < s.outputs().size(); ++i) {
    auto& p = s.outputs()[i];
    if (tc.count(p.GetTypeStr())) by[p.GetTypeStr()].push_back("o" + std::to_string(i));
  }
  std::vector<std::vector<std::string>> out;
  for (auto& kv : by)
    if (kv.second.size() > 1) out.push_back(kv.second);
  std::sort(out.begin(), out.end());
  return out;
}

void CompareParams(const char* what, const std::vector<OpSchema::FormalParameter>& a,
                   const std::vector<OpSchema::FormalParameter>& b, bool is_input, Diff& d) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    auto& pa = a[i];
    auto& pb = b[i];
    if (pa.GetOption() != pb.GetOption()) {
      d.unsafe = true;
      d.notes.push_back(std::string(what) + " " + std::to_string(i) + " option " +
                        OptName(pa.GetOption()) + " -> " + OptName(pb.GetOption()));
    }
    if (pa.GetOption() == OpSchema::Variadic &&
        (pa.GetMinArity() != pb.GetMinArity() || pa.GetIsHomogeneous() != pb.GetIsHomogeneous())) {
      d.unsafe = true;
      d.notes.push_back(std::string(what) + " " + std::to_string(i) + " variadic arity/homogeneity changed");
    }
    auto ta = ParamTypes(pa), tb = ParamTypes(pb);
    for (auto& t : ta)
      if (!tb.count(t)) {
        d.unsafe = true;
        d.notes.push_back(std::string(what) + " " + std::to_string(i) + " type removed: " + t);
      }
    for (auto& t : tb)
      if (!ta.count(t)) d.types.insert(t);
  }
  if (b.size() < a.size()) {
    d.unsafe = true;
    d.notes.push_back(std::string(what) + "s removed: " + std::to_string(a.size()) + " -> " +
                      std::to_string(b.size()));
  }
  for (size_t i = a.size(); i < b.size(); ++i) {
    if (is_input && b[i].GetOption() == OpSchema::Optional &&
        (a.empty() || a.back().GetOption() != OpSchema::Variadic)) {
      d.inputs.push_back(static_cast<int>(i));
      d.notes.push_back("new optional input " + std::to_string(i) + " (" + b[i].GetName() + ")");
    } else {
      d.unsafe = true;
      d.notes.push_back(std::string("new ") + what + " " + std::to_string(i) + " (" + b[i].GetName() +
                        ", " + OptName(b[i].GetOption()) + ")");
    }
  }
}

Diff Compare(const OpSchema& a, const OpSchema& b) {
  Diff d;
  if (b.Deprecated()) {
    d.deprecated = true;
    return d;
  }
  CompareParams("input", a.inputs(), b.inputs(), true, d);
  CompareParams("output", a.outputs(), b.outputs(), false, d);
  size_t nin = std::min(a.inputs().size(), b.inputs().size());
  size_t nout = std::min(a.outputs().size(), b.outputs().size());
  if (Binding(a, nin, nout) != Binding(b, nin, nout)) {
    d.unsafe = true;
    d.notes.push_back("type-variable binding between inputs/outputs changed");
  }
  for (auto& kv : a.attributes()) {
    auto it = b.attributes().find(kv.first);
    if (it == b.attributes().end()) {
      d.unsafe = true;
      d.notes.push_back("attribute removed: " + kv.first);
      continue;
    }
    auto& x = kv.second;
    auto& y = it->second;
    if (x.type != y.type) {
      d.unsafe = true;
      d.notes.push_back("attribute type changed: " + kv.first);
    }
    if (x.required != y.required) {
      d.unsafe = true;
      d.notes.push_back("attribute required changed: " + kv.first);
    }
    if (DefaultKey(x) != DefaultKey(y)) {
      d.unsafe = true;
      d.notes.push_back("attribute default changed: " + kv.first + " " +
                        (HasDefault(x) ? AttrValue(x.default_value) : "<none>") + " -> " +
                        (HasDefault(y) ? AttrValue(y.default_value) : "<none>"));
    }
  }
  for (auto& kv : b.attributes()) {
    if (a.attributes().count(kv.first)) continue;
    auto& y = kv.second;
    if (y.required) {
      d.unsafe = true;
      d.notes.push_back("new required attribute: " + kv.first);
    } else {
      std::string s = kv.first + "=" + (HasDefault(y) ? AttrValue(y.default_value) : "");
      d.attrs.push_back(s);
      d.notes.push_back("new optional attribute " + s);
    }
  }
  if (a.HasFunction() != b.HasFunction() || a.HasContextDependentFunction() != b.HasContextDependentFunction())
    d.notes.push_back("function body presence changed (no semantic effect)");
  if (!d.types.empty()) {
    std::string s = "types added:";
    for (auto& t : d.types) s += " " + t;
    d.notes.push_back(s);
  }
  return d;
}

// Canonical order of element types (ONNX TensorProto.DataType order), then
// anything else alphabetically.
int TypeRank(const std::string& t) {
  static const std::vector<std::string> order = {
      "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool", "float16", "double",
      "uint32", "uint64", "complex64", "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz",
      "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "float8e8m0"};
  auto it = std::find(order.begin(), order.end(), t);
  return it == order.end() ? 1000 : static_cast<int>(it - order.begin());
}

std::string Kind(const Diff& d) {
  if (d.deprecated) return "deprecated";
  if (d.unsafe) return "";
  std::vector<std::string> parts;
  if (!d.types.empty()) {
    std::vector<std::string> ts;
    for (auto& t : d.types) ts.push_back(TypeName(t));
    std::stable_sort(ts.begin(), ts.end(), [](const std::string& x, const std::string& y) {
      int rx = TypeRank(x), ry = TypeRank(y);
      return rx != ry ? rx < ry : x < y;
    });
    std::string s = "types(";
    for (size_t i = 0; i < ts.size(); ++i) s += (i ? "," : "") + ts[i];
    parts.push_back(s + ")");
  }
  if (!d.attrs.empty()) {
    std::string s = "attr(";
    for (size_t i = 0; i < d.attrs.size(); ++i) s += (i ? "," : "") + d.attrs[i];
    parts.push_back(s + ")");
  }
  for (int k : d.inputs) parts.push_back("input(" + std::to_string(k) + ")");
  if (parts.empty()) return "same";
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "+" : "") + parts[i];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string domain = "";
  bool explain = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--domain") && i + 1 < argc) {
      domain = argv[++i];
      if (domain == "ai.onnx") domain = "";
    } else if (!strcmp(argv[i], "--explain")) {
      explain = true;
    } else {
      std::cerr << "usage: " << argv[0] << " [--domain ai.onnx|ai.onnx.ml] [--explain]\n";
      return 2;
    }
  }
  std::map<std::string, std::map<int, const OpSchema*>> ops;
  static const std::vector<OpSchema> all = OpSchemaRegistry::get_all_schemas_with_history();
  for (auto& s : all)
    if (s.domain() == domain) ops[s.Name()][s.since_version()] = &s;

  for (auto& kv : ops) {
    std::ostringstream line;
    std::vector<std::string> notes;
    line << kv.first;
    const OpSchema* prev = nullptr;
    for (auto& vs : kv.second) {
      line << " " << vs.first;
      if (prev) {
        Diff d = Compare(*prev, *vs.second);
        std::string k = Kind(d);
        auto ov = Overrides().find(kv.first + ":" + std::to_string(vs.first));
        if (ov != Overrides().end()) {
          notes.push_back(std::to_string(vs.first) + ": overridden by hand review: '" + k + "' -> '" +
                          ov->second + "'");
          k = ov->second;
        }
        if (!k.empty()) line << ":" << k;
        for (auto& n : d.notes) notes.push_back(std::to_string(vs.first) + ": " + n);
      } else if (vs.second->Deprecated()) {
        line << ":deprecated";
      }
      prev = vs.second;
    }
    std::cout << line.str() << "\n";
    if (explain)
      for (auto& n : notes) std::cout << "#   " << n << "\n";
  }
  return 0;
}
