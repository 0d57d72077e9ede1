// Expand as a broadcast copy (expand_kernel.h says why).
#include "backends/onednn/expand_kernel.h"

#include <memory>

#include "backends/onednn/dnnl_common.h"
#include "ops/elementwise_util.h"

namespace collage::onednn {

bool expand_takes(const Graph& g, const Node& n) {
  return n.domain.empty() && n.op_type == "Expand" && n.inputs.size() == 2 &&
         n.outputs.size() == 1 && is_f32(g, n.input(0)) && g.value(n.input(0)).shape_known &&
         n.input(1) != kNoValue && g.value(n.input(1)).is_constant() && is_f32(g, n.outputs[0]) &&
         g.value(n.outputs[0]).shape_known;
}

void emit_expand(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1 || !expand_takes(sub, sub.node(0)))
    fail(ErrorKind::kUnsupported, "onednn: not one Expand of a constant shape");
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: Expand input is not a kernel input");
  const Shape& in = sub.value(x).shape;
  const Shape& out = sub.value(y).shape;
  const int64_t in_numel = shape_numel(in), out_numel = shape_numel(out);
  const dnnl::memory src = values.read(x, plain_md(in));
  if (!flat_f32(src, in_numel))
    fail(ErrorKind::kUnsupported, "onednn: Expand input is no flat array");
  dnnl::memory dst = values.destination(y, plain_md(out));
  if (!flat_f32(dst, out_numel)) dst = values.fresh_destination(y, plain_md(out));
  auto plan =
      std::make_shared<const ops::elem::BroadcastPlan>(ops::elem::make_broadcast_plan(out, {in}));
  values.program().add_unary_custom(
      kExpandStep,
      [plan](const float* x, float* y) {
        // for_each_row runs one thread under its threshold and inside a lane's one thread.
        ops::elem::broadcast_copy(*plan, x, y);
        return dnnl_success;
      },
      src, dst, dnnl::primitive::kind::reorder);
  values.produced(y, dst);
}

}  // namespace collage::onednn
