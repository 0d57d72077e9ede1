// A Where of a constant condition as one custom step (select_kernel.h says why).
#include "backends/onednn/select_kernel.h"

#include <omp.h>

#include <memory>
#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "ops/elementwise_util.h"

namespace collage::onednn {
namespace {

using ops::elem::kParallelThreshold;

// Which input of Where `n` is the value selected from (1 or 2), or 0 when the node is not
// the form select_takes() accepts.
size_t selected_input(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Where" || n.inputs.size() != 3 || n.outputs.size() != 1 ||
      !is_f32(g, n.outputs[0]) || !g.value(n.outputs[0]).shape_known)
    return 0;
  const Value& condition = g.value(n.input(0));
  if (!condition.is_constant() || condition.dtype != DType::kBool) return 0;
  const Shape& out = g.value(n.outputs[0]).shape;
  for (size_t x : {size_t{1}, size_t{2}}) {
    const size_t fill = 3 - x;
    if (is_f32(g, n.input(x)) && !g.value(n.input(x)).is_constant() &&
        g.value(n.input(x)).shape == out && is_f32(g, n.input(fill)) &&
        g.value(n.input(fill)).is_constant())
      return x;
  }
  return 0;
}

class SelectStep {
 public:
  SelectStep(std::vector<unsigned char> keep, std::vector<float> fill)
      : keep_(std::move(keep)), fill_(std::move(fill)) {}

  dnnl_status_t run(const float* x, float* y) const {
    const int64_t n = static_cast<int64_t>(keep_.size());
    // Under kParallelThreshold elements the loop takes microseconds: one thread (a lane of
    // a concurrent stage is one thread too).
    const int team = omp_in_parallel() || n < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(team)
    {
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      const unsigned char* keep = keep_.data();
      if (fill_.size() == 1) {
        const float f = fill_[0];
        for (int64_t i = begin; i < end; ++i) y[i] = keep[i] ? x[i] : f;
      } else {
        const float* fill = fill_.data();
        for (int64_t i = begin; i < end; ++i) y[i] = keep[i] ? x[i] : fill[i];
      }
    }
    return dnnl_success;
  }

 private:
  std::vector<unsigned char> keep_;  // 1 where x is kept, per output element
  std::vector<float> fill_;          // one value, or one per output element
};

}  // namespace

bool select_takes(const Graph& g, const Node& n) {
  return selected_input(g, n) != 0;
}

void emit_select(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1) fail(ErrorKind::kUnsupported, "onednn: Where fuses nothing after it");
  const Node& n = sub.node(0);
  const size_t x = selected_input(sub, n);
  if (x == 0) fail(ErrorKind::kUnsupported, "onednn: Where of a non-constant condition or fill");
  const Shape& shape = sub.value(n.outputs[0]).shape;
  // Where(c, x, fill) keeps x where c holds; Where(c, fill, x) where it does not.
  std::vector<unsigned char> keep =
      ops::elem::broadcast_elements<bool, unsigned char>(sub.value(n.input(0)).constant, shape);
  if (x == 2)
    for (unsigned char& k : keep) k = !k;
  const Tensor& fill = sub.value(n.input(3 - x)).constant;
  std::vector<float> fills = fill.numel() == 1 ? std::vector<float>{fill.data<float>()[0]}
                                               : ops::elem::broadcast_elements<float>(fill, shape);
  auto step = std::make_shared<SelectStep>(std::move(keep), std::move(fills));
  const dnnl::memory src = values.read(n.input(x), plain_md(shape));
  const dnnl::memory dst = values.destination(n.outputs[0], plain_md(shape));
  values.program().add_custom("select",
                              [step](const dnnl_exec_arg_t* args, int count) {
                                return step->run(custom_step_data(args, count, DNNL_ARG_SRC),
                                                 custom_step_data(args, count, DNNL_ARG_DST));
                              },
                              {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  values.produced(n.outputs[0], dst);
}

}  // namespace collage::onednn
