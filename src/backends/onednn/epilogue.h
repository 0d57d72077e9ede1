// Elementwise tails expressed as oneDNN post-ops. A tail is parsed into steps: one node
// (Relu, Clip with constant bounds, Add/Mul/... with a constant or another tensor) or a
// whole exported GELU (x * 0.5 * (1 + Erf(x / sqrt 2)) -> gelu_erf). Each step maps to one
// or two post-ops. The same parser serves the fusion rule (which proposes tails) and
// compile() (which must accept exactly what was proposed).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/value_memories.h"

namespace collage::onednn {

struct PostOp {
  enum class Kind { kEltwise, kBinary };
  Kind kind = Kind::kEltwise;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0, beta = 0;   // eltwise parameters
  Tensor constant;             // kBinary: constant second operand (float32), or
  ValueId operand = kNoValue;  // kBinary: runtime second operand
  Shape operand_shape;         // kBinary: its shape, left-padded to the output's rank
};

// Nodes covering one post-op step and the value the step produces.
struct TailStep {
  std::vector<NodeId> nodes;
  ValueId out = kNoValue;
  std::vector<PostOp> ops;
  bool reshape = false;  // a Reshape/Flatten/Squeeze/Unsqueeze: no op, the same data
};

using Consumers = std::vector<std::vector<NodeId>>;

// The post-ops of node `node` applied to `cur` (one of its inputs), when the node maps to
// post-ops and keeps the shape of `cur`.
std::optional<std::vector<PostOp>> node_post_ops(const Graph& g, const Node& node, ValueId cur);

// An exported GELU reading `x`: the erf form's five nodes (x * 0.5 * (1 + Erf(x / sqrt 2)))
// or the tanh form's eight (GPT-2's gelu_new), and its output. With `whole_reader`, every
// reader of x must be in it (x is an interior value of a fused kernel).
std::optional<TailStep> match_gelu(const Graph& g, const Consumers& consumers, ValueId x,
                                   bool whole_reader);

// The exported erf-form GELU that Erf node `erf` belongs to (its input the GELU input scaled
// by 1/sqrt 2), or nullopt.
std::optional<TailStep> gelu_around_erf(const Graph& g, const Consumers& consumers,
                                        const Node& erf);

// x * Sigmoid(x) (SiLU; Swish with beta 1, as PyTorch exports nn.SiLU) or x *
// HardSigmoid(x) with alpha 1/6, beta 1/2 (HardSwish, as opset 13 exports nn.Hardswish)
// reading `x`: its two nodes and output, one eltwise_swish or eltwise_hardswish. With
// `whole_reader`, x is read by those two alone.
std::optional<TailStep> match_swish(const Graph& g, const Consumers& consumers, ValueId x,
                                    bool whole_reader);

// A two-node step reading `x` twice (an exported GELU or SiLU), or nullopt.
std::optional<TailStep> match_fused_activation(const Graph& g, const Consumers& consumers,
                                               ValueId x, bool whole_reader);

// The step that reads `cur` next in a tail: all of cur's readers must be in it, so cur
// need not be materialised. Stops (nullopt) at graph outputs.
// A Transpose of an input shaped `in` that keeps the order of the dims larger than 1 (ViT's
// [S, 1, E] <-> [1, S, E]) moves no data: it is a reshape.
bool moves_only_unit_dims(const Shape& in, const Node& transpose);

// With `through_reshape`, a sole reader that only reshapes (row-major data unchanged: a
// Reshape, Flatten, Squeeze, Unsqueeze, or a Transpose moving only size-1 dims) is a
// step too: GPT-2's Conv1D is Gemm then Reshape back to [1, S, N] before its GELU or
// residual Add. MatMul/Gemm heads take it (their dst is plain); the onednn-graph regions,
// whose groups may be blocked, do not.
std::optional<TailStep> next_tail_step(const Graph& g, const Consumers& consumers, ValueId cur,
                                       bool through_reshape = false);

// Parses every node of `subgraph` not yet in `covered` as a tail reading `cur`, in steps;
// throws kUnsupported when some node does not fit or an interior value is an output.
// Returns the ops and the final value (the kernel's only output).
struct Tail {
  std::vector<PostOp> ops;
  ValueId out = kNoValue;
};
// With `through_reshape` (see next_tail_step), post-op operands after a reshape are mapped
// back to the head's output shape: scalars, full-size tensors, and per-last-dim vectors
// when the reshape keeps the last dim; others are kUnsupported.
Tail parse_tail(const Graph& subgraph, ValueId cur, std::vector<bool> covered,
                bool through_reshape = false);

// Post-ops ready for a primitive: built against the primitive's dst dims.
struct BoundPostOps {
  dnnl::post_ops ops;
  std::vector<std::pair<int, dnnl::memory>> args;  // binary operands
  dnnl::memory residual;  // when set: copy it into dst before executing (sum post-op)
  ValueId residual_value = kNoValue;
};

// Maps an operand shape (padded to the output rank) to the primitive's dst dims, or
// nullopt when the kernel's view of dst can't express it (e.g. a flattened MatMul).
using ShapeMapper = std::function<std::optional<Shape>(const Shape&)>;

// `dst_shape`: the tail's (= output's) shape. Runtime operands are read from `values`.
// With `allow_sum`, the first runtime Add of a same-shape tensor becomes a sum post-op
// (dst = result + dst, the residual copied in first). Only conv/matmul take it: oneDNN
// 2.6's binary primitive computed sign-flipped results with it (found by the conformance
// suite on mvn_expanded), its pooling ignored it (NASNet), and a sum with scale -1 (Sub)
// misbehaved too.
// With `dst_layout` (the primitive's destination layout, when known before the post-ops
// are), an operand of the destination's full shape is read in that layout: oneDNN 2.6's jit
// pooling on a blocked source read a row-major one as if it were blocked (a residual Add
// after a pool in a region came out 2e4x off tolerance).
BoundPostOps bind_post_ops(const std::vector<PostOp>& ops, const Shape& dst_shape,
                           const ShapeMapper& map, ValueMemories& values, bool allow_sum = true,
                           const dnnl::memory::desc* dst_layout = nullptr);

// Adds to `values`' program a primitive whose destination follows its source's layout
// (pooling, resampling), with `tail`'s post-ops bound in that layout (no sum post-op), and
// records its output. `make_pd(attr)` creates its primitive descriptor; where
// `acceptable(implementation)` is false the group is refused (kUnsupported), naming `what`.
template <typename Primitive, typename MakePd, typename Acceptable>
void add_layout_following(const Tail& tail, const Shape& out_shape, const dnnl::memory& src,
                          ValueMemories& values, const MakePd& make_pd,
                          const Acceptable& acceptable, const char* what) {
  // The destination's layout (the source's) before the post-ops are bound: an operand of
  // the output's shape must be read in it (see bind_post_ops).
  const dnnl::memory::desc out_layout = make_pd(base_attr()).dst_desc();
  BoundPostOps post = bind_post_ops(
      tail.ops, out_shape, [](const Shape& s) { return std::optional<Shape>(s); }, values,
      /*allow_sum=*/false, &out_layout);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);
  auto pd = make_pd(attr);
  const std::string impl = pd.impl_info_str();
  if (!acceptable(impl))
    fail(ErrorKind::kUnsupported, "onednn: no optimized {} for this group ({})", what, impl);
  Program& program = values.program();
  dnnl::memory dst = values.destination(tail.out, pd.dst_desc());
  if (post.residual) program.copy(post.residual, dst);
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(Primitive(pd), pd, std::move(args));
  values.produced(tail.out, dst);
}

// Whether a binary post-op of `ops` has an operand that varies along a dim past the
// channels (index 2 on: the spatial dims of a conv's output).
bool varies_over_space(const std::vector<PostOp>& ops);

// Removes a leading "add a constant broadcast along `axis` only" from `ops` and returns it
// as a per-channel vector of `channels` values (a bias the primitive adds itself).
std::optional<std::vector<float>> take_channel_bias(std::vector<PostOp>& ops, size_t axis,
                                                    int64_t channels);

}  // namespace collage::onednn
