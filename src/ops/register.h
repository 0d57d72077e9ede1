// One registration function per op group; OpRegistry::global() calls them all once.
// Adding an op: put its OpDef (kind, shape function, reference kernel) in the file of its
// group, or a new group file with a new function listed here and in op_registry.cc.
#pragma once

#include "collage/op_registry.h"

namespace collage::ops {

void register_nn_ops(OpRegistry& registry);  // Conv, pools, Gemm/MatMul, Einsum, norms, RNNs
void register_elementwise_ops(
    OpRegistry& registry);                          // unary/binary math, compare, Cast, Where, Clip
void register_reduction_ops(OpRegistry& registry);  // Reduce*, ArgMax/ArgMin, TopK
void register_tensor_ops(OpRegistry& registry);  // shape/injective ops: Reshape, Concat, Gather...

}  // namespace collage::ops
