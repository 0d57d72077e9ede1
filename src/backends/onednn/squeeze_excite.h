// A squeeze-excitation block as one program step: y = x * gate(W2 act(W1 mean(x) + b1) + b2),
// the mean over the spatial axes (GlobalAveragePool, or ReduceMean over them), W1 and W2
// 1x1 convolutions, act and gate elementwise (Relu, SiLU, HardSigmoid, Sigmoid, ...). As
// exported by PyTorch (torchvision's SqueezeExcitation: EfficientNet, MobileNetV3,
// RegNetY) it is five to seven nodes, and oneDNN runs it as four primitives: a pooling, two
// convolutions over one pixel and a broadcast multiply, each waking both threads for a few
// microseconds of work, and the multiply reading x again from memory.
// Measured (EfficientNet-B0, 2 threads, this EPYC, DNNL_VERBOSE per-primitive times of one
// run): its 16 blocks' primitives took 2.2 of 8.5 ms; a 1x1 conv over one pixel alone
// 0.035-0.04 ms where it has 672 channels in and 28 out (its weights come from memory).
// Here one step reads x twice (the mean, then the product, while it is still in cache), and
// the two matrix-vector products run on the pooled vector in between, each thread taking a
// share of every phase (squeeze_excite.cc). Measured (2 threads, this EPYC):
// - alone, plain NCHW in and out (`ONEDNN_BENCH_THREADS=2 build/bench/bench_onednn_variants
//   --benchmark_filter=se`): 1.6-3.2x faster than the four onednn kernels on EfficientNet-B0's
//   seven block shapes (45 vs 92 us at 32 channels 112x112, 27 vs 44 at 1152 channels 7x7);
// - inside the model's one onednn-graph region, with against without the step, alternating:
//   EfficientNet-B0 5.4-5.6 vs 6.1-6.2 ms, MobileNetV3-Small 1.04-1.07 vs 1.25-1.29,
//   RegNetY-400MF 4.29-4.36 vs 4.54-4.65, EfficientNet-V2-S 21.8-24.6 vs 23.8-24.8.
// What is left in the last blocks is reading the two weight matrices from memory on each run
// (0.2 MB each at 1152 channels: ~40 us of this VM's bandwidth).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/kernel.h"
#include "collage/pattern.h"

namespace collage::onednn {

// The nodes of one block and what the step needs of them.
struct SqueezeExcite {
  std::vector<NodeId> nodes;  // sorted; the mean first
  ValueId x = kNoValue, out = kNoValue;
  NodeId reduce = -1, squeeze = -1, excite = -1;  // the mean and the two 1x1 convs
  std::vector<PostOp> act, gate;                  // after each conv (eltwise only)
};

// The block whose mean is node `mean` of `g` (GlobalAveragePool, or ReduceMean over all
// spatial axes keeping them), when its interior values are read inside it alone and are no
// graph outputs, its convs have constant weights (bias optional) and one group, and its
// elementwise ops are ones the step evaluates (squeeze_excite.cc lists them).
std::optional<SqueezeExcite> match_squeeze_excite(const Graph& g, const Consumers& consumers,
                                                  NodeId mean);
// Every block of `g` (the onednn backend's fusion rule).
std::vector<Match> grow_squeeze_excite(const Graph& g);
// Whether `subgraph` is exactly one block.
bool squeeze_excite_group(const Graph& subgraph);

void emit_squeeze_excite(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_squeeze_excite(const Graph& subgraph);

// The name implementations() reports for the step.
inline constexpr const char* kSqueezeExciteStep = "collage:squeeze_excite";

}  // namespace collage::onednn
