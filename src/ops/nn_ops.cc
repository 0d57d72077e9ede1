// The nn op group: convolutions, pooling, Gemm/MatMul, Einsum, normalizations, Softmax and
// Dropout. Each family lives in its own src/ops/nn_*.cc; this is the group's entry point.
#include "ops/nn_util.h"
#include "ops/register.h"

namespace collage::ops {

void register_nn_ops(OpRegistry& registry) {
  nn::register_conv_ops(registry);
  nn::register_matmul_ops(registry);
  nn::register_pool_ops(registry);
  nn::register_norm_ops(registry);
  nn::register_softmax_ops(registry);
  nn::register_einsum_ops(registry);
  nn::register_recurrent_ops(registry);
}

}  // namespace collage::ops
