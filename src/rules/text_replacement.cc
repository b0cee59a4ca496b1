#include "rules/text_replacement.h"

#include <cmath>

#include <fmt/format.h>

#include "onnx_rewrite/build_context.h"
#include "rules/matcher.h"
#include "graph/scope.h"

namespace onnx_rewrite {
namespace {

using A = onnx::AttributeProto;

A make_value(A::AttributeType type) {
  A value;
  value.set_type(type);
  return value;
}

bool is_number(const A& value) { return value.type() == A::INT || value.type() == A::FLOAT; }
double number(const A& value) { return value.type() == A::INT ? static_cast<double>(value.i()) : value.f(); }

A from_numbers(const std::vector<double>& numbers, bool integral, bool list) {
  if (!list) {
    A value = make_value(integral ? A::INT : A::FLOAT);
    if (integral) value.set_i(static_cast<int64_t>(numbers.front()));
    else value.set_f(static_cast<float>(numbers.front()));
    return value;
  }
  A value = make_value(integral ? A::INTS : A::FLOATS);
  for (double n : numbers) {
    if (integral) value.add_ints(static_cast<int64_t>(n));
    else value.add_floats(static_cast<float>(n));
  }
  return value;
}

// Evaluates one `let` expression against a match.
class Evaluator {
 public:
  explicit Evaluator(const Match& match) : match_(match) {}

  A evaluate(const Expression& e) {
    switch (e.kind) {
      case Expression::Kind::kLiteral: return e.literal;
      case Expression::Kind::kName: {
        if (const A* found = match_.attribute(e.name)) return *found;
        throw Decline(fmt::format("'{}' is not set (absent attribute without default)", e.name));
      }
      case Expression::Kind::kList: return list(e);
      case Expression::Kind::kCall: return call(e);
      case Expression::Kind::kUnary: {
        A operand = evaluate(e.operands[0]);
        if (operand.type() == A::INT) operand.set_i(-operand.i());
        else if (operand.type() == A::FLOAT) operand.set_f(-operand.f());
        else throw Decline("'-' needs a number");
        return operand;
      }
      case Expression::Kind::kBinary: return binary(e.name, evaluate(e.operands[0]), evaluate(e.operands[1]));
    }
    throw Decline("bad expression");
  }

  struct Decline {
    explicit Decline(std::string why) : reason(std::move(why)) {}  // clang 14 has no paren aggregate init
    std::string reason;
  };

 private:
  A list(const Expression& e) {
    std::vector<A> items;
    for (const auto& operand : e.operands) items.push_back(evaluate(operand));
    if (!items.empty() && items.front().type() == A::STRING) {
      A value = make_value(A::STRINGS);
      for (const auto& item : items) value.add_strings(item.s());
      return value;
    }
    bool integral = true;
    std::vector<double> numbers;
    for (const auto& item : items) {
      if (!is_number(item)) throw Decline("list items must be numbers or strings");
      integral = integral && item.type() == A::INT;
      numbers.push_back(number(item));
    }
    return from_numbers(numbers, integral, true);
  }

  A binary(const std::string& op, const A& left, const A& right) {
    const bool lists = left.type() == A::INTS || left.type() == A::FLOATS;
    if (op == "+" && lists && right.type() == left.type()) {
      A joined = left;
      joined.MergeFrom(right);
      return joined;
    }
    if (!is_number(left) || !is_number(right)) throw Decline("arithmetic needs numbers");
    const bool integral = left.type() == A::INT && right.type() == A::INT && op != "/";
    const double a = number(left), b = number(right);
    double result = 0;
    if (op == "+") result = a + b;
    else if (op == "-") result = a - b;
    else if (op == "*") result = a * b;
    else {
      if (b == 0) throw Decline("division by zero");
      result = a / b;
    }
    return from_numbers({result}, integral, false);
  }

  // The pattern value an argument names.
  std::string value_argument(const Expression& e) {
    if (e.operands.size() != 1 || e.operands[0].kind != Expression::Kind::kName) {
      throw Decline(e.name + "() takes one pattern value");
    }
    const std::string& name = e.operands[0].name;
    if (!match_.values.count(name)) throw Decline(fmt::format("{}(): '{}' is not a pattern value", e.name, name));
    if (match_.value(name).empty()) throw Decline(fmt::format("{}(): '{}' is absent", e.name, name));
    return name;
  }

  A call(const Expression& e) {
    const std::string& f = e.name;
    if (f == "int" || f == "float" || f == "ints" || f == "floats") {
      const bool integral = f == "int" || f == "ints";
      const bool list = f == "ints" || f == "floats";
      // A captured attribute or let converts directly; a pattern value must be a constant.
      if (e.operands.size() == 1 && e.operands[0].kind == Expression::Kind::kName && match_.attribute(e.operands[0].name)) {
        const A& value = *match_.attribute(e.operands[0].name);
        if (is_number(value)) return from_numbers({number(value)}, integral, list);
        throw Decline(f + "() of a non-number");
      }
      if (e.operands.size() == 1 && e.operands[0].kind != Expression::Kind::kName) {
        A value = evaluate(e.operands[0]);
        if (!is_number(value)) throw Decline(f + "() of a non-number");
        return from_numbers({number(value)}, integral, list);
      }
      const std::string name = value_argument(e);
      auto values = match_.constant(name);
      if (!values) throw Decline(fmt::format("'{}' is not a readable constant", name));
      if (!list && values->numbers.size() != 1) {
        throw Decline(fmt::format("'{}' holds {} values, {}() wants one", name, values->numbers.size(), f));
      }
      if (integral) {
        for (double n : values->numbers) {
          if (n != std::floor(n)) throw Decline(fmt::format("'{}' holds {}, not an integer", name, n));
        }
      }
      return from_numbers(values->numbers, integral, list);
    }
    if (f == "first") {  // the first operand that has a value: alternatives spell a value differently
      std::string reasons;
      for (const auto& operand : e.operands) {
        try {
          return evaluate(operand);
        } catch (const Decline& decline) {
          reasons += (reasons.empty() ? "" : "; ") + decline.reason;
        }
      }
      throw Decline("first(): no operand has a value (" + reasons + ")");
    }
    if (f == "string") {
      if (e.operands.size() == 1 && e.operands[0].kind == Expression::Kind::kName && match_.attribute(e.operands[0].name)) {
        const A& value = *match_.attribute(e.operands[0].name);
        if (value.type() != A::STRING) throw Decline("string() of a non-string");
        return value;
      }
      const std::string name = value_argument(e);
      auto values = match_.constant(name);
      if (!values || values->strings.size() != 1) throw Decline(fmt::format("'{}' is not a constant holding one string", name));
      A value = make_value(A::STRING);
      value.set_s(values->strings.front());
      return value;
    }
    if (f == "dims" || f == "rank") {
      const std::string name = value_argument(e);
      const ShapeFacts& facts = match_.facts(name);
      if (!facts.shape) throw Decline(fmt::format("the rank of '{}' is unknown", name));
      if (f == "rank") return from_numbers({static_cast<double>(facts.shape->size())}, true, false);
      std::vector<double> dims;
      for (const Dim& dim : *facts.shape) {
        if (!dim.known() || *dim.number < 0) throw Decline(fmt::format("the shape of '{}' is not static", name));
        dims.push_back(static_cast<double>(*dim.number));
      }
      return from_numbers(dims, true, true);
    }
    if (f == "dtype") {
      const std::string name = value_argument(e);
      const int32_t type = match_.facts(name).elem_type;
      if (type == 0) throw Decline(fmt::format("the element type of '{}' is unknown", name));
      return from_numbers({static_cast<double>(type)}, true, false);
    }
    if (f == "len") {
      if (e.operands.size() != 1) throw Decline("len() takes one list");
      const A value = evaluate(e.operands[0]);
      const int size = value.type() == A::INTS ? value.ints_size() : value.type() == A::FLOATS ? value.floats_size() : value.strings_size();
      return from_numbers({static_cast<double>(size)}, true, false);
    }
    throw Decline("unknown function " + f + "() (int, float, ints, floats, string, dims, rank, dtype, len, first)");
  }

  const Match& match_;
};

}  // namespace

std::optional<A> convert_attribute(const A& value, A::AttributeType type, const std::string& name) {
  A converted;
  if (value.type() == type) {
    converted = value;
  } else if (type == A::FLOAT && value.type() == A::INT) {
    converted.set_type(A::FLOAT);
    converted.set_f(static_cast<float>(value.i()));
  } else if (type == A::INT && value.type() == A::FLOAT && value.f() == std::floor(value.f())) {
    converted.set_type(A::INT);
    converted.set_i(static_cast<int64_t>(value.f()));
  } else if (type == A::FLOATS && value.type() == A::INTS) {
    converted.set_type(A::FLOATS);
    for (int64_t i : value.ints()) converted.add_floats(static_cast<float>(i));
  } else {
    return std::nullopt;
  }
  converted.set_name(name);
  converted.clear_ref_attr_name();
  converted.clear_doc_string();
  return converted;
}

std::string evaluate_lets(const Rule& rule, Match& match) {
  for (const auto& let : rule.lets) {
    try {
      A value = Evaluator(match).evaluate(let.expression);
      value.clear_name();
      match.attributes[let.name] = std::move(value);
    } catch (const Evaluator::Decline& decline) {
      return fmt::format("let {} (line {}): {}", let.name, let.line, decline.reason);
    }
  }
  return {};
}

BuildResult TextReplacement::build(const Match& match, GraphBuilder& builder) const {
  std::map<std::string, Value> local;
  for (const auto& input : inputs_) local[input] = Value{match.value(input)};
  for (const auto& written : nodes_) {
    onnx::NodeProto node = written;
    node.clear_attribute();
    for (const auto& attribute : written.attribute()) {
      if (attribute.ref_attr_name().empty()) {
        *node.add_attribute() = attribute;
        continue;
      }
      const A* value = match.attribute(attribute.ref_attr_name());
      if (!value) continue;  // unset: the op's own default applies, as in an ONNX function call
      auto converted = convert_attribute(*value, attribute.type(), attribute.name());
      if (!converted) {
        return decline(fmt::format("@{} is {}, the replacement wants {}", attribute.ref_attr_name(), A::AttributeType_Name(value->type()),
                                   A::AttributeType_Name(attribute.type())));
      }
      *node.add_attribute() = std::move(*converted);
    }
    if (auto tensor = constant_node_tensor(node); tensor && node.output_size() == 1) {
      local[node.output(0)] = builder.constant(std::move(*tensor));
      continue;
    }
    std::vector<Value> inputs;
    for (const auto& input : node.input()) inputs.push_back(input.empty() ? Value{} : local.at(input));
    const auto outputs = builder.op_named(node, inputs);
    for (int i = 0; i < node.output_size(); ++i) local[node.output(i)] = outputs[static_cast<size_t>(i)];
  }
  for (const auto& output : outputs_) {
    if (!match.value(output).empty()) builder.output(match.value(output), local.at(output));  // else an absent optional output
  }
  return built();
}

BuildResult BuilderReplacement::build(const Match& match, GraphBuilder& builder) const {
  const BuildContext context(match, builder_.signature);
  return builder_.build(context, builder);
}

}  // namespace onnx_rewrite
