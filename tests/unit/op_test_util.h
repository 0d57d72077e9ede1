// Runs one op through its shape function and reference kernel, without the importer or
// the executor: what op unit tests need.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collage/op_registry.h"

namespace collage::testing {

struct OpInput {
  Tensor tensor;          // undefined = omitted optional input
  bool constant = false;  // visible to the shape function as a constant (e.g. Reshape's shape)
};

inline Attribute attr_i(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}
inline Attribute attr_f(float v) {
  Attribute a;
  a.type = Attribute::Type::kFloat;
  a.f = v;
  return a;
}
inline Attribute attr_s(std::string v) {
  Attribute a;
  a.type = Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}
inline Attribute attr_ints(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}
inline Attribute attr_floats(std::vector<float> v) {
  Attribute a;
  a.type = Attribute::Type::kFloats;
  a.floats = std::move(v);
  return a;
}
inline Attribute attr_strings(std::vector<std::string> v) {
  Attribute a;
  a.type = Attribute::Type::kStrings;
  a.strings = std::move(v);
  return a;
}
inline Attribute attr_t(Tensor t) {
  Attribute a;
  a.type = Attribute::Type::kTensor;
  a.t = std::move(t);
  return a;
}

// Infers output types, allocates outputs and runs the reference kernel. Throws what the
// shape function or kernel throws (collage::Error).
inline std::vector<Tensor> run_op(const std::string& op_type, const std::vector<OpInput>& inputs,
                                  std::map<std::string, Attribute> attrs = {},
                                  size_t num_outputs = 1, int64_t opset = 17) {
  const OpDef* def = OpRegistry::global().find(op_type);
  if (!def) fail(ErrorKind::kUnsupported, "op {} is not registered", op_type);
  Graph g;
  g.opset = opset;
  Node node;
  node.name = op_type + "_under_test";
  node.op_type = op_type;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const OpInput& in = inputs[i];
    if (!in.tensor.defined()) {
      node.inputs.push_back(kNoValue);
    } else if (in.constant) {
      node.inputs.push_back(g.add_constant("in" + std::to_string(i), in.tensor));
    } else {
      ValueId v = g.add_value("in" + std::to_string(i), in.tensor.dtype(), in.tensor.shape(), true);
      g.inputs.push_back(v);
      node.inputs.push_back(v);
    }
  }
  for (size_t i = 0; i < num_outputs; ++i)
    node.outputs.push_back(g.add_value("out" + std::to_string(i)));
  NodeId id = g.add_node(node);
  InferContext ctx(g, g.node(id));
  def->infer(ctx);
  std::vector<Tensor> outs;
  for (size_t i = 0; i < num_outputs; ++i) {
    if (!ctx.output_set(i)) fail(ErrorKind::kInternal, "{}: output {} not inferred", op_type, i);
    Value& v = g.value(g.node(id).outputs[i]);
    v.dtype = ctx.output_dtype(i);
    v.shape = ctx.output_shape(i);
    v.shape_known = true;
    outs.emplace_back(v.dtype, v.shape);
  }
  RefKernel kernel = def->reference(g, g.node(id));
  std::vector<Tensor> ins;
  for (const auto& in : inputs) ins.push_back(in.tensor);
  kernel(ins, outs);
  return outs;
}

}  // namespace collage::testing
