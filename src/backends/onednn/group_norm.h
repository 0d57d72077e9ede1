// GroupNorm as PyTorch exports it (Reshape [N, G, -1] -> InstanceNormalization -> Reshape
// back -> Mul gamma -> Add beta, opsets 9-17), and InstanceNormalization alone, as one step
// of collage's code: each group's plane is read twice for its mean and variance while it is
// in cache, then once more to write (x - mean) / sqrt(var + eps) * scale + shift, scale and
// shift per channel (the InstanceNormalization's per group times the affine's per channel).
//
// Why: oneDNN 2.6 computes instance statistics only with its batch normalization, whose
// plain-layout (ncsp) implementation is C++ loops, not jit. Measured in a diffusion-style
// UNet (GroupNorm(32) everywhere, 2 threads, this EPYC; tune's cost DB, 2026-12-07):
// InstanceNormalization of [1, 32, 512] took 0.142 ms on onednn against 0.016 on the
// reference backend, [1, 32, 256] 0.074 against 0.009. So the tuned plan ran all 10 of the
// model's GroupNorms on reference (21 reference nodes, a quarter of its predicted time) and
// its onednn-graph regions were cut at each: 0.94-0.98x ONNX Runtime.
// Its threads split the pixels (channels-last) or the planes (row-major; each plane's range
// where there are fewer planes than threads: GroupNorm(1), PoolFormer's LayerNorm over C, H,
// W). The step reads and writes channels-last where x's producer wrote that (brgconv's and
// collage's Winograd's layout in a region), row-major otherwise, and takes the SiLU that
// follows a diffusion model's every GroupNorm: in a VAE-decoder-style model (GroupNorm(32)
// and SiLU at up to 256x256 with 128 channels) the reorders to and from row-major around the
// row-major step and the SiLU's eltwise primitive took 43 of its 253 ms of primitives; with
// them gone it ran 206 ms against 229-236 (ORT 409-422), alternating, 2 threads.
// GroupNormalization (opset 18-21) is lowered on import to the exported form
// (ir/function_op_lowering.cc).
#pragma once

#include <optional>
#include <vector>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/pattern.h"

namespace collage::onednn {

// The nodes of one exported GroupNorm and what the step needs of them.
struct GroupNorm {
  std::vector<NodeId> nodes;  // sorted; the first Reshape heads them
  ValueId x = kNoValue, out = kNoValue;
  int64_t groups = 0;
  float epsilon = 0;
  // Per channel of one image: the InstanceNormalization's scale and shift of the channel's
  // group, composed with the Mul and Add that follow (1 and 0 where there are none).
  std::vector<float> scale, shift;
  bool silu = false;  // a SiLU of its output is part of it
};

// The GroupNorm whose first Reshape is node `reshape` of `g`: x [N, C, ...] reshaped to
// [N, G, C / G * ...], an InstanceNormalization of constant scale and bias, a Reshape back
// to x's shape, then as many of a Mul and an Add by per-channel constants and a SiLU (x *
// Sigmoid(x)) as read the previous value alone. Interior values must be read inside it alone
// and be no graph outputs.
std::optional<GroupNorm> match_group_norm(const Graph& g, const Consumers& consumers,
                                          NodeId reshape);
// Every GroupNorm of `g` (the onednn backend's fusion rule).
std::vector<Match> grow_group_norm(const Graph& g);
// Whether `subgraph` is exactly one GroupNorm.
bool group_norm_group(const Graph& subgraph);
void emit_group_norm(const Graph& subgraph, ValueMemories& values);

// InstanceNormalization node `node` of `sub` (constant scale and bias) as the same step:
// each (n, c) plane a group of one channel.
void emit_instance_norm_step(const Graph& sub, const Node& node, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kGroupNormStep = "collage:group_norm";

}  // namespace collage::onednn
