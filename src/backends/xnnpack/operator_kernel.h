// The op-level kernel: one XNNPACK operator between the kernel's row-major boundary
// tensors. Operands XNNPACK reads as they are (fully-connected, elementwise, softmax) are
// bound directly; spatial ops' NCHW tensors are staged through the kernel's own NHWC
// buffers. Staged pointers never change, so an operator whose operands are all staged or
// constant is set up once at compile time; otherwise it is set up again only when the
// caller's pointers change (an executor's arena keeps them fixed from run to run).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backends/xnnpack/thread_pool.h"
#include "backends/xnnpack/xnn_common.h"
#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::xnnpack {

struct Operand {
  int external = -1;  // index into run()'s inputs; -1 for a constant
  Tensor constant;    // owning, already in the operator's layout
  bool staged_nhwc = false;
  Shape nchw;  // the NCHW shape when staged
};

// Operand for value `v` of the kernel's subgraph: a constant (copied, reordered to NHWC
// when `nhwc`) or the external input it is.
Operand bind_operand(const Graph& subgraph, ValueId v, bool nhwc);

// Binds the operator to data pointers (xnn_setup_*).
using SetupFn =
    std::function<xnn_status(const float* const* inputs, float* output, pthreadpool_t pool)>;

struct OperatorSpec {
  OperatorPtr op;
  std::vector<Operand> inputs;
  bool output_staged_nhwc = false;
  Shape output_nchw;  // the output's shape (NCHW when staged)
  SetupFn setup;
  const char* what = "operator";  // names the operator in errors
};

class OperatorKernel : public Kernel {
 public:
  OperatorKernel(OperatorSpec spec, std::shared_ptr<ThreadPool> pool);
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override;

 private:
  void setup_if_moved(float* output);

  OperatorSpec spec_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<std::vector<float>> staging_;  // per input; empty unless staged
  std::vector<float> output_staging_;
  std::vector<const float*> pointers_;  // this run's operand pointers
  std::vector<const float*> bound_;     // what the operator was last set up with
  float* bound_output_ = nullptr;
};

}  // namespace collage::xnnpack
