// The `cudnn` backend (op-level, GPU): convolutions (1-3D, grouped, dilated, transposed) with
// their BatchNormalization folded and bias / residual Add / Relu fused, and pooling, through
// cuDNN 9. A convolution's algorithm is a variant: the search measures each one cuDNN offers
// for the shape and keeps the fastest (cuDNN's own heuristic pick is the default, "").
#include <fmt/format.h>

#include <algorithm>

#include "backends/cudnn/cudnn_common.h"
#include "backends/cudnn/cudnn_kernels.h"
#include "collage/backend.h"
#include "ops/nn_util.h"

namespace collage::cudnn_backend {
namespace {

using cuda::CudaDevice;

bool float_input(const Graph& g, const Node& n) {
  return !n.inputs.empty() && n.inputs[0] != kNoValue &&
         g.value(n.inputs[0]).dtype == DType::kFloat32;
}

// What the kernels take (the rest is checked, and refused, at compile).
bool conv_head(const Graph& g, const Node& n) {
  if (!float_input(g, n)) return false;
  const size_t rank = g.value(n.inputs[0]).shape.size();
  return rank >= 3 && rank <= 5 && n.outputs.size() == 1;
}

bool pool_head(const Graph& g, const Node& n) {
  if (!float_input(g, n)) return false;
  const size_t rank = g.value(n.inputs[0]).shape.size();
  // MaxPool's Indices output cannot be produced.
  return rank >= 3 && rank <= 5 && (n.outputs.size() < 2 || n.outputs[1] == kNoValue);
}

// A fused chain has one output (its last node's) and a residual that is another tensor of
// the convolution's shape.
bool chain_check(const Graph& g, const Match& m) {
  if (boundary_of(g, m.nodes).outputs.size() != 1) return false;
  for (NodeId id : m.nodes) {
    const Node& n = g.node(id);
    if (n.op_type != "Add") continue;
    for (ValueId v : n.inputs) {
      const Value& val = g.value(v);
      if (val.producer >= 0 &&
          std::find(m.nodes.begin(), m.nodes.end(), val.producer) != m.nodes.end())
        continue;
      if (val.is_constant() || val.shape != g.value(n.outputs[0]).shape) return false;
    }
  }
  return true;
}

class CudnnBackend : public Backend {
 public:
  std::string name() const override { return "cudnn"; }
  std::string version() const override { return library_version(); }
  std::string thread_model() const override { return "CUDA stream"; }
  bool available() const override { return CudaDevice::get().available(); }
  std::string unavailable_reason() const override { return CudaDevice::get().unavailable_reason(); }
  Device* device() const override { return &CudaDevice::get(); }
  int float32_significand_bits() const override { return CudaDevice::matmul_significand_bits(); }
  std::vector<std::string> details() const override {
    return {
        "cuDNN's legacy convolution API (cudnnConvolutionBiasActivationForward for "
        "conv + bias + residual + Relu), NCHW float32",
        CudaDevice::tf32() ? "TF32 allowed (COLLAGE_CUDA_TF32=1)"
                           : "float32 math (no TF32; COLLAGE_CUDA_TF32=1 allows it)"};
  }

  std::vector<PatternEntry> patterns() const override {
    const Pattern conv =
        op("Conv", {any(), constant(), maybe(constant())}).where(conv_head, "float32, 1-3D");
    const Pattern bn = optional(conv, [](const Pattern& p) {
      return op("BatchNormalization", {p, constant(), constant(), constant(), constant()});
    });
    const Pattern residual = optional(bn, [](const Pattern& p) {
      return op("Add", {p, any()}) | op("Add", {any(), p});
    });
    const Pattern conv_chain = optional(residual, [](const Pattern& p) { return op("Relu", {p}); });
    const Pattern transposed = optional(op("ConvTranspose", {any(), constant(), maybe(constant())})
                                            .where(conv_head, "float32, 1-3D"),
                                        [](const Pattern& p) { return op("Relu", {p}); });
    return {
        {"Conv(+BatchNormalization)(+Add)(+Relu)", conv_chain, chain_check},
        {"ConvTranspose(+Relu)", transposed, chain_check},
        {"Pool",
         op_in({"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"})
             .where(pool_head, "float32, 1-3D, no Indices"),
         {}},
    };
  }

  std::vector<std::string> variants(const Graph& subgraph) const override {
    if (subgraph.num_nodes() == 0) return {""};
    const std::string& head = subgraph.node(0).op_type;
    if (head == "Conv") return conv_algorithm_names();
    if (head == "ConvTranspose") return conv_transpose_algorithm_names();
    return {""};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (subgraph.num_nodes() == 0) fail(ErrorKind::kUnsupported, "cudnn: empty subgraph");
    CudaDevice& device = CudaDevice::get();
    if (!device.available()) fail(ErrorKind::kBackend, "cudnn: {}", device.unavailable_reason());
    const std::string& head = subgraph.node(0).op_type;
    if (head == "Conv") return compile_conv(subgraph, options.variant);
    if (head == "ConvTranspose") return compile_conv_transpose(subgraph, options.variant);
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "cudnn: no variant '{}' for {}", options.variant, head);
    if (head == "MaxPool" || head == "AveragePool" || head == "GlobalMaxPool" ||
        head == "GlobalAveragePool")
      return compile_pool(subgraph);
    fail(ErrorKind::kUnsupported, "cudnn: op {}", head);
  }
};

COLLAGE_REGISTER_BACKEND(CudnnBackend);

}  // namespace
}  // namespace collage::cudnn_backend
