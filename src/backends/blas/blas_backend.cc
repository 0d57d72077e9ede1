// The `blas` backend: GEMM-shaped ops on OpenBLAS's sgemm with a fused elementwise
// epilogue. Op-level: each kernel is one library GEMM (per image/batch) plus its tail, or a
// recurrent layer's products and cell updates (recurrent_kernel.h).
#include <algorithm>
#include <set>

#include "backends/blas/conv_kernel.h"
#include "backends/blas/conv_transpose_kernel.h"
#include "backends/blas/epilogue.h"
#include "backends/blas/fused_group.h"
#include "backends/blas/gemm_kernel.h"
#include "backends/blas/openblas_info.h"
#include "backends/blas/recurrent_kernel.h"
#include "collage/backend.h"

namespace collage::blas {
namespace {

// Runs a kernel with OpenBLAS's process-wide thread count set to the kernel's own.
class ThreadCountKernel : public Kernel {
 public:
  ThreadCountKernel(std::unique_ptr<Kernel> inner, int threads)
      : inner_(std::move(inner)), threads_(threads) {}
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    set_openblas_threads(threads_);
    inner_->run(inputs, outputs);
  }

 private:
  std::unique_ptr<Kernel> inner_;
  int threads_;
};

// Tail nodes fused after one head, at most (GELU after a bias Add is 6).
constexpr int kMaxEpilogue = 7;

bool is_float32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

// What the kernels accept as a head, judged on the node alone (compile() re-checks all).
bool head_ok(const Graph& g, const Node& n) {
  if (!is_head_op(n.op_type) || !is_float32(g, n.input(0)) || !is_float32(g, n.input(1)) ||
      n.outputs.empty() || !is_float32(g, n.outputs[0]))
    return false;
  if (n.op_type == "Conv" || n.op_type == "ConvTranspose") {
    const Value& w = g.value(n.input(1));
    if (!w.is_constant() || (n.input(2) != kNoValue && !g.value(n.input(2)).is_constant()))
      return false;
    if (n.op_type == "Conv" && n.attr_int("group", 1) > 1 && w.shape.size() > 1 && w.shape[1] == 1)
      return false;  // depthwise
  }
  return true;
}

// Whether `n` can join the epilogue of `region` (whose head yields `shape`): an op the
// epilogue runs, reading the region, constants, or outside values of the same shape.
bool tail_ok(const Graph& g, const Node& n, const std::set<NodeId>& region, const Shape& shape) {
  if (!Epilogue::supports_op(n.op_type) || n.outputs.empty() || !is_float32(g, n.outputs[0]) ||
      g.value(n.outputs[0]).shape != shape)
    return false;
  bool reads_region = false;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ValueId v = n.inputs[i];
    if (v == kNoValue) continue;
    const Value& value = g.value(v);
    if (value.producer >= 0 && region.count(value.producer)) {
      reads_region = true;
    } else if (n.op_type == "Clip" ? i > 0 && value.is_constant() : value.is_constant()) {
      continue;
    } else if (n.op_type == "Clip" || value.shape != shape || value.dtype != DType::kFloat32) {
      return false;
    }
  }
  return reads_region;
}

// Grows each head into its elementwise tail one node at a time (the lowest-numbered
// consumer that fits), proposing every prefix. Unlike a chain, a tail may read the head
// twice (GELU: x * 0.5 * (1 + erf(x / sqrt 2))) or a residual input.
std::vector<Match> grow_epilogues(const Graph& g) {
  std::vector<Match> out;
  const auto consumers = g.consumers();
  for (size_t h = 0; h < g.num_nodes(); ++h) {
    const Node& head = g.node(static_cast<NodeId>(h));
    if (!head_ok(g, head)) continue;
    const Shape& shape = g.value(head.outputs[0]).shape;
    std::set<NodeId> region = {static_cast<NodeId>(h)};
    for (int added = 0; added < kMaxEpilogue; ++added) {
      NodeId next = -1;
      for (NodeId r : region)
        for (ValueId v : g.node(r).outputs)
          if (v != kNoValue)
            for (NodeId u : consumers[v])
              if (!region.count(u) && (next < 0 || u < next) &&
                  tail_ok(g, g.node(u), region, shape))
                next = u;
      if (next < 0) break;
      region.insert(next);
      out.push_back(Match{std::vector<NodeId>(region.begin(), region.end())});
    }
  }
  return out;
}

class BlasBackend : public Backend {
 public:
  std::string name() const override { return "blas"; }
  // Part of every cost key: a change to how kernels run re-measures them. r1: a one-row
  // GEMM runs as sgemv (gemm_kernel.cc). The kernel OpenBLAS picked is part of it too: these
  // machines export OPENBLAS_CORETYPE=Haswell, and a vit-tiny plan tuned without it (blas
  // GEMMs of 3 us each) ran 0.28 ms with it against 0.06 ms: costs measured under one
  // kernel must not be reused under the other, and a plan run under another kernel warns.
  std::string version() const override { return openblas_version() + "+r1 " + openblas_kernel(); }
  std::string thread_model() const override { return "OpenBLAS pthreads"; }
  std::vector<std::string> details() const override { return openblas_details(); }

  std::vector<PatternEntry> patterns() const override {
    auto f32 = [](const Graph& g, const Node& n) { return head_ok(g, n); };
    const char* kWhat = "float32, not depthwise";
    return {
        {"MatMul", op("MatMul").where(f32, kWhat), {}},
        {"Gemm", op("Gemm").where(f32, kWhat), {}},
        {"Conv", op("Conv", {any(), constant(), maybe(constant())}).where(f32, kWhat), {}},
        {"ConvTranspose",
         op("ConvTranspose", {any(), constant(), maybe(constant())}).where(f32, kWhat),
         {}},
        {"Recurrent",
         op_in({"RNN", "GRU", "LSTM"})
             .where(recurrent_takes,
                    "float32, one sequence, default functions, no clip, full length, layout 0"),
         {}},
    };
  }

  std::vector<FusionRule> fusion_rules() const override {
    FusionRule rule;
    rule.name = "gemm_epilogue";
    rule.description = fmt::format(
        "MatMul/Gemm/Conv/ConvTranspose followed by up to {} elementwise ops (Add/Sub/Mul/Div "
        "with constants or same-shape inputs, Relu, LeakyRelu, Clip, Sigmoid, Tanh, Erf)",
        kMaxEpilogue);
    rule.generate = grow_epilogues;
    return {rule};
  }

  // OpenBLAS's pthreads build has one thread count per process: each kernel sets it before it
  // runs, so two kernels with different counts must not run at the same time.
  ThreadControl thread_control() const override { return ThreadControl::kProcessWide; }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "blas: no variant '{}'", options.variant);
    set_openblas_threads(options.threads);
    if (subgraph.num_nodes() == 1 && recurrent_takes(subgraph, subgraph.node(0)))
      return std::make_unique<ThreadCountKernel>(compile_recurrent(subgraph, options.threads),
                                                 options.threads);
    const int threads = helper_threads(options.threads);
    const NodeId head = find_head(subgraph);
    const std::string& op = subgraph.node(head).op_type;
    std::unique_ptr<Kernel> kernel;
    if (op == "Conv")
      kernel = compile_conv(subgraph, head, threads);
    else if (op == "ConvTranspose")
      kernel = compile_conv_transpose(subgraph, head, threads);
    else
      kernel = compile_gemm(subgraph, head, threads);
    return std::make_unique<ThreadCountKernel>(std::move(kernel), options.threads);
  }
};

}  // namespace
}  // namespace collage::blas

namespace collage {
using BlasBackend = blas::BlasBackend;
COLLAGE_REGISTER_BACKEND(BlasBackend);
}  // namespace collage
