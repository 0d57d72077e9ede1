// Shared pieces of the tensor (shape/injective) op group: attribute/input helpers for
// shape functions, and one copy engine that most data-movement kernels reduce to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collage/op_registry.h"

namespace collage::ops {

// Sub-group registration, all called from register_tensor_ops().
void register_tensor_shape_ops(OpRegistry& registry);   // Reshape, Shape, Constant, Range...
void register_tensor_layout_ops(OpRegistry& registry);  // Transpose, Concat, Slice, Pad...
void register_tensor_index_ops(OpRegistry& registry);   // Gather*, Scatter*, OneHot...
void register_tensor_resize_ops(OpRegistry& registry);  // Resize, Upsample, GridSample
void register_grid_sample_op(OpRegistry& registry);     // GridSample (tensor_grid_sample.cc)

// Throws kUnsupported naming the node: for valid ONNX that collage does not implement.
template <typename... Args>
[[noreturn]] void tensor_unsupported(const Node& node, fmt::format_string<Args...> format,
                                     Args&&... args) {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("node '{}' ({}): {}", node.name, node.op_type,
                          fmt::format(format, std::forward<Args>(args)...)));
}

// Data-movement ops work on any dtype with a fixed element size; this rejects the rest.
void tensor_require_movable(const InferContext& ctx, size_t input);
// Shape-like inputs (Reshape's shape, Expand's shape, Tile's repeats) are int64 by the
// ONNX spec; reading a float one as integers would silently build some other shape.
void tensor_require_int64(const InferContext& ctx, size_t input, const char* what);
// Rejects dtypes the value-interpreting kernels (Range, Resize...) do not compute in.
void tensor_require_dtype_in(const InferContext& ctx, size_t input,
                             std::initializer_list<DType> allowed);

// What a Slice node takes from each input dim, by the reference's rule (negative and
// out-of-range starts/ends, negative steps): the output shape, the first element and the
// step per dim. For backends that read a slice in place (a strided view) instead of
// copying it. Throws like the shape function when its starts/ends/axes/steps are not
// constant.
struct SliceWindow {
  Shape out;
  std::vector<int64_t> start, step;
};
SliceWindow slice_window(const Graph& graph, const Node& node);

// What a Resize/Upsample node reads, by the reference's rule, per dimension: for output
// index o, input indices index[start[o] .. start[o+1]) with their weights (nearest: one tap
// of weight 1; linear 2, cubic 4, taps past an edge clamped or dropped as the mode says).
// `outside[o]`: tf_crop_and_resize samples outside the input there (the value is
// `extrapolation`). For backends that compute any mode with the reference's coordinates.
struct ResizeTaps {
  struct Dim {
    std::vector<size_t> start;
    std::vector<int64_t> index;
    std::vector<double> weight;
    std::vector<bool> outside;
  };
  std::vector<Dim> dims;
  double extrapolation = 0;
};
ResizeTaps resize_taps(const Graph& graph, const Node& node);

// GridSample (opset 16: X of N x C x H x W, grid of N x Ho x Wo x 2 holding (x, y) in
// [-1, 1]) by the rule of PyTorch's grid_sampler, which ONNX's test data comes from: each
// output pixel's source coordinate, the padding mode applied to it (bilinear, nearest) or to
// each of the 16 taps (bicubic, A = -0.75), and every channel sampled with the same taps.
struct GridSampleSpec {
  enum class Mode { kBilinear, kNearest, kBicubic } mode = Mode::kBilinear;
  enum class Padding { kZeros, kBorder, kReflection } padding = Padding::kZeros;
  bool align_corners = false;
};
// Throws kInvalidModel naming the node for an unknown mode or padding mode.
GridSampleSpec grid_sample_spec(const Node& node);
// Y (N x C x Ho x Wo) from X (shape `x_shape`) and the grid, both row-major, or both
// channels-last (N x H x W x C in memory: each tap a contiguous channel vector) with
// `channels_last`; `parallel`: rows of the output over the OpenMP team.
void grid_sample(const GridSampleSpec& spec, const float* x, const Shape& x_shape,
                 const float* grid, int64_t out_h, int64_t out_w, float* y, bool parallel,
                 bool channels_last = false);

// Shapes recorded on the graph after inference, for kernel factories.
inline const Shape& tensor_input_shape(const Graph& g, const Node& n, size_t i) {
  return g.value(n.inputs.at(i)).shape;
}
inline DType tensor_input_dtype(const Graph& g, const Node& n, size_t i) {
  return g.value(n.inputs.at(i)).dtype;
}
inline const Shape& tensor_output_shape(const Graph& g, const Node& n, size_t i) {
  return g.value(n.outputs.at(i)).shape;
}
inline DType tensor_output_dtype(const Graph& g, const Node& n, size_t i) {
  return g.value(n.outputs.at(i)).dtype;
}

// An OpDef of this group (all in the default domain).
OpDef tensor_op(const char* name, OpKind kind, InferFn infer, RefKernelFactory reference,
                bool value_dependent_shape = false);

// Slice's cut, from its constant starts/ends/axes/steps (inputs, or attributes before
// opset 10), clamped as the spec says. Backends read it too (one parse of the rule).
struct SliceSpec {
  Shape out;
  std::vector<int64_t> start, step;  // per input dimension
};
SliceSpec slice_spec(const InferContext& ctx);

// Pad's mode and amounts (constant `pads`/`axes` inputs, or attributes before opset 11).
enum class PadMode { kConstant, kReflect, kEdge };
struct PadSpec {
  PadMode mode = PadMode::kConstant;
  std::vector<int64_t> begin, end;  // per dimension, negative = crop
  double attr_value = 0;            // Pad-2's `value`; later opsets pass an input
};
PadSpec pad_spec(const InferContext& ctx);
// The input index output index `o` of a dimension of `d` input elements padded by `begin`
// reads, or -1 where a constant-mode Pad writes its value. Reflect mirrors without
// repeating the edge, as numpy.pad does.
int64_t pad_source(PadMode mode, int64_t o, int64_t begin, int64_t d);

// Product of dims [from, to): the outer/inner block sizes around an axis.
inline int64_t tensor_product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// Kernels of this group address elements by byte offset, whatever their dtype.
inline const std::byte* tensor_bytes(const Tensor& t) {
  return static_cast<const std::byte*>(t.raw());
}
inline std::byte* tensor_bytes_mut(const Tensor& t) {
  return static_cast<std::byte*>(t.raw());
}

// Clamps `v` to [lo, hi].
inline int64_t tensor_clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// A kernel that copies its single input to its single output unchanged (Reshape,
// Identity, Squeeze...): the bytes of a row-major tensor do not depend on its shape.
RefKernel tensor_memcpy_kernel();
RefKernel tensor_memcpy_factory(const Graph& graph, const Node& node);

// Marks an output element that takes the fill value instead of an input element. Small
// enough that a sum of one per dimension still cannot overflow, large enough that any
// such sum stays negative next to real offsets (which are < 2^56 elements).
constexpr int64_t kTensorFill = -(int64_t{1} << 56);

// out[i_0, ..., i_{r-1}] = in[maps[0][i_0] + ... + maps[r-1][i_{r-1}]] (offsets in
// elements), or the fill value when any map entry is kTensorFill. Transpose, Slice,
// Expand, Tile, Pad, DepthToSpace and nearest Resize are all this with different maps.
// Built once in a kernel factory; run() only loops, copying contiguous rows with memcpy.
class TensorGatherPlan {
 public:
  TensorGatherPlan() = default;
  TensorGatherPlan(Shape out_dims, std::vector<std::vector<int64_t>> maps, size_t elem_size);

  // A strided view: out[i] = in[offset + sum_k i_k * strides[k]]. Merges dimensions that
  // are contiguous in both tensors first, so a Transpose of [B,S,H,D] copies D-long rows.
  static TensorGatherPlan strided(const Shape& out_dims, const std::vector<int64_t>& in_strides,
                                  int64_t offset, size_t elem_size);

  // `fill` points at one element (needed only when a map holds kTensorFill).
  void run(const std::byte* in, std::byte* out, const std::byte* fill = nullptr) const;

 private:
  void copy_row(const std::byte* in, std::byte* out, int64_t base, const std::byte* fill) const;

  Shape dims_;
  std::vector<std::vector<int64_t>> maps_;
  size_t elem_ = 0;
  int64_t numel_ = 0;
  bool inner_contiguous_ = false;  // the last map is consecutive offsets without fills
};

}  // namespace collage::ops
