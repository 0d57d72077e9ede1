// The elementwise op group: entry point and the broadcast plan shared by its kernels.
#include "ops/elementwise_util.h"
#include "ops/register.h"

namespace collage::ops {
namespace elem {

BroadcastPlan make_broadcast_plan(const Shape& out, const std::vector<Shape>& operands) {
  if (operands.size() > static_cast<size_t>(kMaxOperands))
    fail(ErrorKind::kInternal, "broadcast plan over {} operands", operands.size());
  BroadcastPlan plan;
  plan.num_operands = static_cast<int>(operands.size());
  plan.numel = shape_numel(out);
  if (plan.numel == 0) {
    plan.inner = 0;
    return plan;
  }
  const size_t rank = out.size();
  // Per output dim (size > 1 only: size-1 dims step nowhere), each operand's stride, 0 where
  // the operand is broadcast along it.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, kMaxOperands>> strides;
  std::vector<std::vector<int64_t>> operand_strides;
  for (const Shape& s : operands) {
    if (s.size() > rank) fail(ErrorKind::kInternal, "operand rank above output rank");
    operand_strides.push_back(shape_strides(s));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    std::array<int64_t, kMaxOperands> st{};
    for (size_t k = 0; k < operands.size(); ++k) {
      const Shape& s = operands[k];
      size_t lead = rank - s.size();
      if (d < lead || s[d - lead] == 1) continue;
      if (s[d - lead] != out[d]) fail(ErrorKind::kInternal, "operand does not broadcast");
      st[k] = operand_strides[k][d - lead];
    }
    dims.push_back(out[d]);
    strides.push_back(st);
  }
  // Merge from the innermost dim outwards while every operand continues contiguously.
  std::vector<int64_t> merged_dims;
  std::vector<std::array<int64_t, kMaxOperands>> merged_strides;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    bool can_merge = !merged_dims.empty();
    for (int k = 0; can_merge && k < plan.num_operands; ++k)
      can_merge = strides[d][k] == merged_strides.back()[k] * merged_dims.back();
    if (can_merge) {
      merged_dims.back() *= dims[d];
    } else {
      merged_dims.push_back(dims[d]);
      merged_strides.push_back(strides[d]);
    }
  }
  if (merged_dims.empty()) {  // every dim is 1: a single element
    plan.inner = 1;
    return plan;
  }
  plan.inner = merged_dims[0];
  plan.inner_stride = merged_strides[0];
  for (size_t g = merged_dims.size(); g-- > 1;) {
    plan.outer.push_back(merged_dims[g]);
    for (int k = 0; k < plan.num_operands; ++k)
      plan.outer_stride[k].push_back(merged_strides[g][k]);
  }
  return plan;
}

}  // namespace elem

void register_elementwise_ops(OpRegistry& registry) {
  elem::register_unary_ops(registry);
  elem::register_binary_ops(registry);
  elem::register_cast_ops(registry);
}

}  // namespace collage::ops
