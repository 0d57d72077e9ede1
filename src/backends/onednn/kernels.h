// The kernel families of the onednn backend. Each compile_* takes the standalone subgraph
// handed to Backend::compile, whose first node is the family's op (followed by an
// elementwise tail fused as post-ops where the family allows), and throws
// Error(kUnsupported) for what it can't express. The families a region can hold also have
// an emit_*: the same group appended to a program that may hold others, reading its
// operands from and recording its output in `values` (see value_memories.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/kernel.h"
#include "collage/pattern.h"

namespace collage::onednn {

struct PostOp;  // epilogue.h

using Emitter = void (*)(const Graph& subgraph, ValueMemories& values);
// A kernel of one group: `emit` over plain memories bound to the subgraph's boundary.
std::unique_ptr<Kernel> compile_group(const Graph& subgraph, Emitter emit);

// Conv / ConvTranspose (1-3 spatial dims, groups, bias) + tail.  conv_kernel.cc
// The algorithm of a Conv: direct (oneDNN's default, its layouts its choice: channels-last
// brgconv on AVX-512), Winograd with 4 outputs per tile side (the "winograd" variant: F(4x4,
// 3x3), F(1x4, 1x7), ...) or 2 ("winograd2x2"; winograd_conv.h), or direct on channel-blocked
// activations (the "blocked" variant: the output nChw16c, the input read in the activation
// layout it has; oneDNN's jit kernels, and the one-pass 1x1 + depthwise kernel; measured in
// docs/DESIGN.md "Variants").
enum class ConvAlgorithm { kDirect, kWinograd, kWinograd2x2, kBlocked };
// Whether Conv node `n` has the shape oneDNN's Winograd kernels take (checked without
// creating a primitive; the primitive may still refuse the group's post-ops).
bool winograd_candidate(const Graph& g, const Node& n);
void emit_conv(const Graph& subgraph, ValueMemories& values,
               ConvAlgorithm algorithm = ConvAlgorithm::kDirect);
std::unique_ptr<Kernel> compile_conv(const Graph& subgraph,
                                     ConvAlgorithm algorithm = ConvAlgorithm::kDirect);
// Whether `n` of `g` is a Conv over a float32 input of `rank` dims with constant float32
// weights and a constant float32 bias or none, output float32, shapes known (where collage's
// own conv steps start from).
bool constant_float_conv_node(const Graph& g, const Node& n, size_t rank);
// Whether Conv node `n` of `g` is depthwise over a float32 input of `rank` dims: group = input
// channels = output channels, constant float32 weights [C, 1, k...], a constant float32 bias or
// none (what collage's depthwise steps, depthwise_conv2d.h and depthwise_conv3d.h, start from).
bool depthwise_conv_node(const Graph& g, const Node& n, size_t rank);
// A 1x1 stride-1 Conv, its eltwise tail, a 3x3 depthwise Conv (pads 1, stride 1 or 2) and
// its eltwise tail as ONE primitive: the depthwise conv is the 1x1's post-op (append_dw).
// grow_conv_dw proposes every such chain (each prefix of the second tail).  conv_kernel.cc
std::vector<Match> grow_conv_dw(const Graph& g);
bool conv_dw_group(const Graph& subgraph);
// The depthwise conv that can run as a post-op of 1x1 conv `head` of `g`, reading `cur`
// (the head's output or the end of its eltwise tail) alone; -1 when there is none.
NodeId depthwise_post_op(const Graph& g, const std::vector<std::vector<NodeId>>& consumers,
                         NodeId head, ValueId cur);
// Which of oneDNN's forms of the pair a kernel takes. kAnyJit: also `ref_fused_convolution`
// (two jit primitives one after another through a scratchpad), a kernel of its own where the
// alternative is two kernels with a plain boundary between them. kOnePass: only the one-pass
// jit_1x1 form (the depthwise rows computed as the 1x1 produces them); a region refuses the
// two-primitive form, where its own two primitives in one program ran 20-30 % faster per pair
// (MobileNetV2 at 2 threads, docs/DESIGN.md "Cross-op fusion: 1x1 conv + depthwise conv").
enum class DepthwisePairForm { kAnyJit, kOnePass };
// Whether oneDNN's implementation of the pair is one the backends take: its one-pass jit
// kernel, or its two-primitive form with no reference part.
bool jit_fused(const std::string& implementation);
void emit_conv_dw(const Graph& subgraph, ValueMemories& values,
                  ConvAlgorithm algorithm = ConvAlgorithm::kDirect,
                  DepthwisePairForm form = DepthwisePairForm::kAnyJit);
std::unique_ptr<Kernel> compile_conv_dw(const Graph& subgraph);
// The implementation oneDNN picks for Conv node `node` (forward, direct, no post-ops, layouts
// its choice) with input, weights and output of these shapes; "" where it has none.
std::string forward_conv_implementation(const Node& node, const Shape& xs, const Shape& ws,
                                        const Shape& ys);
// MatMul (batched, broadcasting) / Gemm (transA/B, alpha, beta, C) + tail.  matmul_kernel.cc
// Node 0 may be a Reshape/Flatten/Squeeze/Unsqueeze of A (read in place), then the head.
void emit_matmul(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_matmul(const Graph& subgraph);
// Whether `subgraph` starts with a reshape whose only use is node 1's A (a MatMul/Gemm).
bool leads_matmul(const Graph& subgraph);
// Reshape, Flatten, Squeeze, Unsqueeze, or a Transpose moving only size-1 dims: the same
// row-major data under another shape.  matmul_kernel.cc
bool is_reshape_node(const Graph& graph, const Node& node);
// Max/Average/GlobalMax/GlobalAverage pooling + tail.  pool_kernel.cc
void emit_pool(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_pool(const Graph& subgraph);
// Resize/Upsample (nearest or linear, spatial dims) + tail.  resample_kernel.cc
// The resampling algorithm that computes node `n` exactly as ONNX defines it, or nullopt
// (the forms it takes are listed in resample_kernel.cc).
std::optional<dnnl::algorithm> resample_form(const Graph& g, const Node& n);
void emit_resample(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_resample(const Graph& subgraph);
// BatchNormalization (inference statistics, optional fused Relu).  norm_kernel.cc
void emit_batch_norm(const Graph& subgraph, ValueMemories& values);
// InstanceNormalization of one image (constant scale and bias); LRN across channels of an
// odd size; rank 3-5, float32. The *_takes predicates say which nodes (the patterns' and
// regions' rule; the emitters refuse the rest).  norm_kernel.cc
bool instance_norm_takes(const Graph& g, const Node& n);
bool lrn_takes(const Graph& g, const Node& n);
void emit_instance_norm(const Graph& subgraph, ValueMemories& values);
void emit_lrn(const Graph& subgraph, ValueMemories& values);
// BatchNormalization (inference, optional Relu), LayerNormalization, Softmax/LogSoftmax,
// and the exported LayerNorm decomposition.  norm_kernel.cc
std::unique_ptr<Kernel> compile_norm(const Graph& subgraph);
// LayerNormalization, Softmax/LogSoftmax, or the exported LayerNorm decomposition headed by
// its first ReduceMean (row-major, in regions too).  norm_kernel.cc
void emit_norm(const Graph& subgraph, ValueMemories& values);
// The nodes (sorted) of the exported LayerNorm decomposition that ReduceMean node `mean`
// heads, with its optional scale and shift, each interior value read inside it alone.
std::optional<std::vector<NodeId>> layer_norm_nodes(
    const Graph& g, const std::vector<std::vector<NodeId>>& consumers, NodeId mean);
// Whether ReduceMean node `reduce_mean` is the head or the variance of such a decomposition.
bool in_layer_norm(const Graph& g, const std::vector<std::vector<NodeId>>& consumers,
                   NodeId reduce_mean);
// PRelu with constant slopes per channel (dim 1): oneDNN's prelu primitive, in the layout
// its input has; a single slope is an eltwise relu (emit_prelu passes that, and any chain it
// heads, to emit_elementwise).  eltwise_kernel.cc
bool prelu_takes(const Graph& g, const Node& n);
void emit_prelu(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_prelu(const Graph& subgraph);
// A chain of elementwise ops (unary, binary with broadcasting, exported GELU).
// eltwise_kernel.cc
void emit_elementwise(const Graph& subgraph, ValueMemories& values);
// The post-op steps `ops` applied to `x` of `subgraph` in one pass, writing `out`: the first
// step as an eltwise or binary primitive, the rest as its post-ops. With `refuse_reference`,
// kUnsupported where oneDNN has only its reference loop for them.
void emit_post_op_chain(std::vector<PostOp> ops, ValueId x, ValueId out, bool refuse_reference,
                        const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_elementwise(const Graph& subgraph);

// The families as one table, so that the patterns, compile(), emit_group() and the region
// ops cannot disagree on which op goes where: the ops that head a group of the family, how
// such a group compiles as a kernel of its own, how it is emitted into a region (nullptr:
// only as a kernel of its own), and whether its primitive fuses an elementwise tail as
// post-ops. Groups headed by any other op are elementwise chains (compile_elementwise).
struct Family {
  std::string name;
  std::vector<std::string> ops;
  std::unique_ptr<Kernel> (*compile)(const Graph& subgraph);
  Emitter emit;
  bool post_op_tail;
};
const std::vector<Family>& families();
const Family& family(const std::string& name);        // by name ("pool"); must exist
const Family* family_of(const std::string& op_type);  // nullptr: not a family's head

// The glue between primitives (layout_kernel.cc): Concat, Slice/Split, a one-index Gather,
// Transpose, a constant Pad, ReduceMean/ReduceMax over all spatial axes, and the channel shuffle
// Reshape -> Transpose -> Reshape (a group of its three nodes).
bool layout_head(const Graph& graph, const Node& node);
// The Transpose and second Reshape of a channel shuffle headed by Reshape node `reshape`.
std::optional<std::vector<NodeId>> channel_shuffle(const Graph& graph,
                                                   const std::vector<std::vector<NodeId>>& readers,
                                                   NodeId reshape);
void emit_layout(const Graph& subgraph, ValueMemories& values);
// `shape` in the layout `like` is in when that is an activation layout oneDNN picks
// (channel-blocked or channels-last, rank 3-5), else row-major.
dnnl::memory::desc layout_like(const dnnl::memory::desc& like, const Shape& shape);
// The layouts to try, best first, for the result of concatenating values in layouts `mds`
// along `axis` into `shape`: never row-major first when the inputs are in activation
// layouts (layout_kernel.cc).
std::vector<dnnl::memory::desc> concat_layouts(const std::vector<dnnl::memory::desc>& mds,
                                               const Shape& shape, int64_t axis);
// The axes Reduce* node `n` reduces, normalized and sorted (every axis when it names none);
// nullopt when they are not constants or it is the identity (noop_with_empty_axes).
std::optional<std::vector<int64_t>> reduced_axes(const Graph& g, const Node& n);
// Whether ReduceMean/ReduceMax node `n` reduces exactly the spatial axes (2..) of a rank 3-5
// input: a global pooling. Other reductions run on oneDNN's reduction primitive.
bool spatial_reduce(const Graph& g, const Node& n);
// `shape` channels-last (rank 3-5), else nullopt.
std::optional<dnnl::memory::desc> channels_last_md(const Shape& shape);
// `region` with each zero Pad of spatial dims whose readers are all convolutions or average
// pools (that count padding, or have none) folded into those readers' pads.
Graph fold_pads(const Graph& region);
std::unique_ptr<Kernel> compile_layout(const Graph& subgraph);

// The exported LayerNorm decomposition (ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps
// -> Sqrt -> Div [-> Mul gamma] [-> Add beta]) over the last axis, when `nodes` of `graph`
// are exactly that.
struct LayerNormSpec {
  ValueId x = kNoValue, out = kNoValue;
  ValueId gamma = kNoValue, beta = kNoValue;  // constants, or kNoValue
  float epsilon = 0;
};
std::optional<LayerNormSpec> match_layer_norm(const Graph& graph, const std::vector<NodeId>& nodes);

// The exported RMSNorm of LLaMA, Mistral, Gemma and T5 (Pow 2 -> ReduceMean -> Add eps -> Sqrt
// -> Div(1, .) or Reciprocal -> Mul with x, or Sqrt -> Div(x, .) [-> Mul gamma]) over the
// last axis, when `nodes` of `graph` are exactly that. oneDNN 2.6's layer normalization has
// no RMS form: it runs as one step of collage's code (kRmsNormStep), one pass over each row
// for the sum of squares and one to scale it, where the exported form took five primitives
// (0.11 ms a layer in a 768-wide decoder at 128 tokens, docs/DESIGN.md).
struct RmsNormSpec {
  ValueId x = kNoValue, out = kNoValue;
  ValueId gamma = kNoValue;  // a constant along the last axis, or kNoValue
  float epsilon = 0;
};
std::optional<RmsNormSpec> match_rms_norm(const Graph& graph, const std::vector<NodeId>& nodes);
// Whether all of `subgraph` is one RMSNorm.
bool rms_norm_group(const Graph& subgraph);
// The nodes (sorted) of the exported RMSNorm that Pow node `pow` heads, with its optional
// scale, each interior value read inside it alone (a region's group).
std::optional<std::vector<NodeId>> rms_norm_nodes(const Graph& g,
                                                  const std::vector<std::vector<NodeId>>& consumers,
                                                  NodeId pow);
void emit_rms_norm(const Graph& subgraph, ValueMemories& values);
inline constexpr const char* kRmsNormStep = "collage:rms_norm";

}  // namespace collage::onednn
