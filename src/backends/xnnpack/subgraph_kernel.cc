#include "backends/xnnpack/subgraph_kernel.h"

#include "backends/xnnpack/layout.h"

namespace collage::xnnpack {

SubgraphKernel::SubgraphKernel(BuiltSubgraph built, std::shared_ptr<ThreadPool> pool)
    : pool_(std::move(pool)), static_data_(std::move(built.static_data)) {
  xnn_runtime_t runtime = nullptr;
  check_status(xnn_create_runtime_v2(built.subgraph.get(), pool_->get(), kOperatorFlags, &runtime),
               "create runtime");
  runtime_.reset(runtime);
  bool all_staged = true;
  auto add = [&](std::vector<BoundaryTensor>& list, const ExternalTensor& t) {
    // Zero-filled here so its pages are touched at compile time, not in run().
    list.push_back({t, std::vector<float>(t.nhwc ? shape_numel(t.shape) : 0)});
    externals_.push_back({t.id, t.nhwc ? list.back().staging.data() : nullptr});
    all_staged = all_staged && t.nhwc;
  };
  inputs_.reserve(built.inputs.size());
  outputs_.reserve(built.outputs.size());
  for (const ExternalTensor& t : built.inputs) add(inputs_, t);
  for (const ExternalTensor& t : built.outputs) add(outputs_, t);
  bound_.assign(externals_.size(), nullptr);
  if (all_staged) {
    setup_if_moved();
    return;
  }
  // Setup binds pointers and never reads through them: stand-ins make a shape XNNPACK
  // refuses fail here rather than in the first run().
  alignas(64) static float stand_in[16];
  std::vector<xnn_external_value> trial = externals_;
  for (xnn_external_value& e : trial)
    if (!e.data) e.data = stand_in;
  check_status(xnn_setup_runtime(runtime_.get(), trial.size(), trial.data()), "setup runtime");
}

void SubgraphKernel::setup_if_moved() {
  bool moved = false;
  for (size_t i = 0; i < externals_.size(); ++i) moved = moved || externals_[i].data != bound_[i];
  if (!moved) return;
  check_status(xnn_setup_runtime(runtime_.get(), externals_.size(), externals_.data()),
               "setup runtime");
  for (size_t i = 0; i < externals_.size(); ++i) bound_[i] = externals_[i].data;
}

void SubgraphKernel::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  pthreadpool_t pool = pool_->get();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    BoundaryTensor& in = inputs_[i];
    if (in.tensor.nhwc)
      nchw_to_nhwc(inputs[i].data<float>(), in.staging.data(), in.tensor.shape, pool);
    else
      externals_[i].data = inputs[i].raw();
  }
  for (size_t j = 0; j < outputs_.size(); ++j)
    if (!outputs_[j].tensor.nhwc) externals_[inputs_.size() + j].data = outputs[j].raw();
  setup_if_moved();
  check_status(xnn_invoke_runtime(runtime_.get()), "invoke runtime");
  for (size_t j = 0; j < outputs_.size(); ++j) {
    const BoundaryTensor& out = outputs_[j];
    if (out.tensor.nhwc)
      nhwc_to_nchw(out.staging.data(), outputs[j].data<float>(), out.tensor.shape, pool);
  }
  pool_->yield_workers();
}

std::unique_ptr<Kernel> compile_subgraph(const Graph& region, std::shared_ptr<ThreadPool> pool) {
  BuiltSubgraph built = build_subgraph(region);
  // The runtime keeps what it needs of the subgraph, which goes when `built` does.
  return std::make_unique<SubgraphKernel>(std::move(built), std::move(pool));
}

}  // namespace collage::xnnpack
