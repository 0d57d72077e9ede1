#include "ir/canonical.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>

namespace collage {
namespace {

constexpr int64_t kValuesInKey = 16;

std::string attribute_text(const Attribute& a) {
  switch (a.type) {
    case Attribute::Type::kFloat:
      return fmt::format("f{}", a.f);
    case Attribute::Type::kInt:
      return fmt::format("i{}", a.i);
    case Attribute::Type::kString:
      return fmt::format("s'{}'", a.s);
    case Attribute::Type::kFloats:
      return fmt::format("F[{}]", fmt::join(a.floats, ","));
    case Attribute::Type::kInts:
      return fmt::format("I[{}]", fmt::join(a.ints, ","));
    case Attribute::Type::kStrings:
      return fmt::format("S[{}]", fmt::join(a.strings, ","));
    case Attribute::Type::kTensor:
      return fmt::format("T{}{}", dtype_name(a.t.dtype()), shape_to_string(a.t.shape()));
  }
  return "?";
}

std::string constant_text(const Tensor& t, bool signs_only) {
  std::string s = fmt::format("const {}{}", dtype_name(t.dtype()), shape_to_string(t.shape()));
  if (t.numel() <= kValuesInKey) {
    s += signs_only ? " positions " : "=";
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = t.get_as_double(i);
      if (signs_only)
        s += v < 0 ? '-' : '+';
      else
        s += fmt::format("{}{}", i ? "," : "", v);
    }
  }
  return s;
}

// The constants of `g` read only as a gather's positions (input 1 of Gather, GatherElements,
// GatherND).
std::set<ValueId> gather_positions(const Graph& g) {
  std::set<ValueId> positions, elsewhere;
  for (const Node& n : g.nodes())
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      if (v == kNoValue || !g.value(v).is_constant()) continue;
      const bool gather =
          n.op_type == "Gather" || n.op_type == "GatherElements" || n.op_type == "GatherND";
      (gather && i == 1 ? positions : elsewhere).insert(v);
    }
  for (ValueId v : g.outputs) elsewhere.insert(v);
  for (ValueId v : elsewhere) positions.erase(v);
  return positions;
}

std::string text_of(const Graph& g, const std::set<ValueId>& values_left_out) {
  std::map<ValueId, int> number;
  std::string text = fmt::format("opset {}\n", g.opset);
  auto ref = [&](ValueId v) -> std::string {
    if (v == kNoValue) return "_";
    auto it = number.find(v);
    if (it != number.end()) return fmt::format("%{}", it->second);
    int id = static_cast<int>(number.size());
    number[v] = id;
    const Value& value = g.value(v);
    // A value seen first as an input: a constant or a boundary input.
    text += fmt::format(
        "%{} = {}\n", id,
        value.is_constant()
            ? constant_text(value.constant, values_left_out.count(v) > 0)
            : fmt::format("input {}{}", dtype_name(value.dtype), shape_to_string(value.shape)));
    return fmt::format("%{}", id);
  };
  for (ValueId v : g.inputs) ref(v);
  for (const Node& n : g.nodes()) {
    std::vector<std::string> ins;
    for (ValueId v : n.inputs) ins.push_back(ref(v));
    std::string line = fmt::format("{}{}{}({})", n.domain, n.domain.empty() ? "" : ".", n.op_type,
                                   fmt::join(ins, ", "));
    for (const auto& [key, attr] : n.attrs)
      line += fmt::format(" {}={}", key, attribute_text(attr));
    std::vector<std::string> outs;
    for (ValueId v : n.outputs) {
      if (v == kNoValue) {
        outs.push_back("_");
        continue;
      }
      int id = static_cast<int>(number.size());
      number[v] = id;
      const Value& value = g.value(v);
      outs.push_back(
          fmt::format("%{}:{}{}", id, dtype_name(value.dtype), shape_to_string(value.shape)));
    }
    text += fmt::format("{} = {}\n", fmt::join(outs, ", "), line);
  }
  std::vector<std::string> outs;
  for (ValueId v : g.outputs) outs.push_back(ref(v));
  text += fmt::format("return {}\n", fmt::join(outs, ", "));
  return text;
}

}  // namespace

std::string canonical_text(const Graph& g) {
  return text_of(g, {});
}

std::string cost_text(const Graph& g) {
  return text_of(g, gather_positions(g));
}

namespace {

std::string fnv1a_64(const std::string& text, uint64_t offset_basis) {
  uint64_t h = offset_basis;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;  // the FNV 64-bit prime
  }
  return fmt::format("{:016x}", h);
}

}  // namespace

std::string digest(const std::string& text) {
  return fnv1a_64(text, 14695981039346656037ULL);  // the FNV-1a 64 offset basis
}

std::string digest_before_schema_3(const std::string& text) {
  return fnv1a_64(text, 1469598103934665603ULL);
}

}  // namespace collage
