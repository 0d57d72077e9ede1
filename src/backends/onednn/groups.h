// The groups the onednn backends run as one primitive: a head op and the elementwise tail
// its primitive fuses as post-ops. `onednn` proposes each as a kernel; `onednn-graph`
// covers a region with them and emits them into one program.
#pragma once

#include <string>
#include <vector>

#include "backends/onednn/kernels.h"
#include "backends/onednn/value_memories.h"
#include "collage/pattern.h"

namespace collage::onednn {

// Tail steps fused after one head at most (a bias Add, a GELU, a residual Add, a Relu...).
constexpr int kMaxTail = 6;

const std::vector<std::string>& unary_ops();
const std::vector<std::string>& binary_ops();

// Ops that only reinterpret row-major data (Flatten, Reshape, Squeeze, Unsqueeze,
// Identity): views, no data moves unless the input is blocked.
bool is_view_op(const Node& n);
// Ops whose primitive takes post-ops, judged on the node alone (compile() checks the rest).
bool primitive_head(const Graph& g, const Node& n);
// An elementwise node this backend runs on its own, reading `*x`.
bool elementwise_head(const Graph& g, const Node& n, ValueId* x = nullptr);
// Every head (primitive, elementwise node, exported GELU) with each prefix of its tail.
std::vector<Match> grow_tails(const Graph& g);

// Appends group `subgraph` (node 0 its head; a view op alone is a view) to
// values.program(), dispatching on the head's op; a Conv head uses `conv_algorithm`, a
// 1x1 + depthwise pair `pair_form`. Throws kUnsupported for heads without an emitter.
void emit_group(const Graph& subgraph, ValueMemories& values,
                ConvAlgorithm conv_algorithm = ConvAlgorithm::kDirect,
                DepthwisePairForm pair_form = DepthwisePairForm::kAnyJit);

}  // namespace collage::onednn
