#include "backends/xnnpack/operator_kernel.h"

#include <algorithm>

#include "backends/xnnpack/layout.h"

namespace collage::xnnpack {

Operand bind_operand(const Graph& subgraph, ValueId v, bool nhwc) {
  const Value& value = subgraph.value(v);
  Operand operand;
  if (value.is_constant()) {
    // Cloned: the kernel must not depend on the model's storage.
    if (nhwc) {
      std::vector<float> data = to_nhwc(value.constant);
      operand.constant = Tensor::from_vector<float>({static_cast<int64_t>(data.size())}, data);
    } else {
      operand.constant = value.constant.clone();
    }
    return operand;
  }
  auto it = std::find(subgraph.inputs.begin(), subgraph.inputs.end(), v);
  if (it == subgraph.inputs.end())
    fail(ErrorKind::kInternal, "xnnpack: value '{}' is neither an input nor a constant",
         value.name);
  operand.external = static_cast<int>(it - subgraph.inputs.begin());
  operand.staged_nhwc = nhwc;
  operand.nchw = value.shape;
  return operand;
}

OperatorKernel::OperatorKernel(OperatorSpec spec, std::shared_ptr<ThreadPool> pool)
    : spec_(std::move(spec)), pool_(std::move(pool)) {
  bool all_fixed = true;
  for (const Operand& in : spec_.inputs) {
    // Zero-filled now so the pages are touched at compile time, not in run().
    staging_.emplace_back(in.staged_nhwc ? shape_numel(in.nchw) : 0);
    pointers_.push_back(in.external < 0  ? in.constant.data<float>()
                        : in.staged_nhwc ? staging_.back().data()
                                         : nullptr);
    all_fixed = all_fixed && (in.external < 0 || in.staged_nhwc);
  }
  bound_.assign(pointers_.size(), nullptr);
  if (spec_.output_staged_nhwc) output_staging_.resize(shape_numel(spec_.output_nchw));
  if (all_fixed && spec_.output_staged_nhwc) {
    setup_if_moved(output_staging_.data());
    return;
  }
  // Set up once with stand-in pointers (setup binds pointers, it never reads through them),
  // so a shape XNNPACK refuses fails compile() rather than the first run().
  alignas(64) static float stand_in[16];
  std::vector<const float*> real = pointers_;
  for (size_t i = 0; i < pointers_.size(); ++i)
    if (!pointers_[i]) pointers_[i] = stand_in;
  check_status(
      spec_.setup(pointers_.data(), spec_.output_staged_nhwc ? output_staging_.data() : stand_in,
                  pool_->get()),
      spec_.what);
  pointers_ = std::move(real);
}

void OperatorKernel::setup_if_moved(float* output) {
  if (output == bound_output_ && pointers_ == bound_) return;
  check_status(spec_.setup(pointers_.data(), output, pool_->get()), spec_.what);
  bound_ = pointers_;
  bound_output_ = output;
}

void OperatorKernel::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  pthreadpool_t pool = pool_->get();
  for (size_t i = 0; i < spec_.inputs.size(); ++i) {
    const Operand& in = spec_.inputs[i];
    if (in.external < 0) continue;
    const float* data = inputs[in.external].data<float>();
    if (in.staged_nhwc)
      nchw_to_nhwc(data, staging_[i].data(), in.nchw, pool);
    else
      pointers_[i] = data;
  }
  float* out = outputs[0].data<float>();
  setup_if_moved(spec_.output_staged_nhwc ? output_staging_.data() : out);
  check_status(xnn_run_operator(spec_.op.get(), pool), spec_.what);
  if (spec_.output_staged_nhwc) nhwc_to_nchw(output_staging_.data(), out, spec_.output_nchw, pool);
  pool_->yield_workers();
}

}  // namespace collage::xnnpack
