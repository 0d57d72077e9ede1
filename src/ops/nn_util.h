// Private helpers shared by the nn op group (Conv, pools, Gemm/MatMul, norms, Softmax).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collage/op_registry.h"

namespace collage::ops::nn {

// Entry points of the group's source files; register_nn_ops calls them all.
void register_conv_ops(OpRegistry& registry);
void register_matmul_ops(OpRegistry& registry);
void register_pool_ops(OpRegistry& registry);
void register_norm_ops(OpRegistry& registry);
void register_softmax_ops(OpRegistry& registry);
void register_einsum_ops(OpRegistry& registry);
void register_recurrent_ops(OpRegistry& registry);  // RNN, GRU, LSTM (nn_recurrent.cc)

// Throws Error(kind) prefixed with the node's name and op, like InferContext::fail.
template <typename... Args>
[[noreturn]] void node_fail(const Node& node, ErrorKind kind, fmt::format_string<Args...> format,
                            Args&&... args) {
  throw Error(kind, fmt::format("node '{}' ({}): {}", node.name, node.op_type,
                                fmt::format(format, std::forward<Args>(args)...)));
}

// The reference kernels of this group are written for float32 and float64 only.
bool is_float_type(DType t);
// Checks that input i is float32/float64 (kUnsupported otherwise) and, when `like` is
// given, that it has the same dtype as input `like` (mixed precision is kUnsupported).
DType require_float_input(const InferContext& ctx, size_t i, int like = -1);
// True when the node has output i and the model did not omit it.
bool output_used(const Node& node, size_t i);

// Calls f(T{}) for T = float or double.
template <typename F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::kFloat64) return f(double{});
  if (t != DType::kFloat32)
    fail(ErrorKind::kInternal, "nn kernel built for unsupported type {}", dtype_name(t));
  return f(float{});
}

// Floor/ceil division for a positive divisor and any sign of numerator.
inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
inline int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// The indices i in [0, count) with 0 <= i * step + offset < limit, as [lo, hi); step > 0.
// Used to clip sliding windows against tensor borders without per-element checks.
struct Range {
  int64_t lo, hi;
};
inline Range valid_range(int64_t offset, int64_t step, int64_t limit, int64_t count) {
  int64_t lo = offset >= 0 ? 0 : ceil_div(-offset, step);
  int64_t hi = ceil_div(limit - offset, step);
  if (lo < 0) lo = 0;
  if (lo > count) lo = count;  // a window wholly in the padding: an empty range at the end
  if (hi > count) hi = count;
  if (hi < lo) hi = lo;
  return {lo, hi};
}

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };
AutoPad parse_auto_pad(const Node& node);

// Sliding-window geometry (Conv, ConvTranspose, pools), one entry per spatial axis.
// For ConvTranspose `in` and `out` keep their meaning (input and output sizes), the
// window maps input positions to output positions instead of the reverse.
struct Window {
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
  size_t rank() const { return in.size(); }
  // Extent of the dilated kernel along axis i.
  int64_t span(size_t i) const { return (kernel[i] - 1) * dilation[i] + 1; }
  // The same geometry with leading unit axes so that it has exactly 3 axes: kernels are
  // written once for 3-D and serve 1-D and 2-D too.
  Window as_3d() const;
};

// Reads strides, dilations, pads and auto_pad (validated against the rank of `in`) and
// computes the output size of a Conv or pooling window. `ceil_mode` is the pools' attr.
Window forward_window(const Node& node, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                      bool ceil_mode);

// Reads the kernel_shape attribute of a pool (required; must match the spatial rank).
std::vector<int64_t> pool_kernel_shape(const Node& node, size_t spatial_rank);

// Product of shape[begin, end).
int64_t dims_product(const Shape& shape, size_t begin, size_t end);

// Whether a GroupNormalization of this opset has its scale and bias per channel (opset 21's
// definition) or per group (18-20).  nn_norm.cc
bool group_norm_params_per_channel(int64_t opset);

}  // namespace collage::ops::nn
