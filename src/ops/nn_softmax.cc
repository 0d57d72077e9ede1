// Softmax, LogSoftmax and Hardmax (both axis conventions), and Dropout in inference form.
#include <cmath>
#include <cstring>

#include "ops/nn_util.h"

namespace collage::ops::nn {
namespace {

enum class SoftmaxType { kSoftmax, kLogSoftmax, kHardmax };

// The input viewed as (outer, n, inner), reducing over n. Before opset 13 these ops
// flattened the input to 2-D at `axis` (default 1); from 13 they reduce along `axis` alone
// (default -1).
struct SoftmaxParams {
  int64_t outer = 0, n = 0, inner = 0;
};

SoftmaxParams softmax_params(const Node& node, int64_t opset, const Shape& x) {
  int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) node_fail(node, ErrorKind::kShape, "input must have rank >= 1");
  const bool coerce_2d = opset < 13;
  int64_t axis = node.attr_int("axis", coerce_2d ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    node_fail(node, ErrorKind::kShape, "axis {} is out of range for input {}",
              node.attr_int("axis", 0), shape_to_string(x));
  SoftmaxParams p;
  p.outer = dims_product(x, 0, axis);
  if (coerce_2d) {
    p.n = dims_product(x, axis, rank);
    p.inner = 1;
  } else {
    p.n = x[axis];
    p.inner = dims_product(x, axis + 1, rank);
  }
  return p;
}

void infer_softmax(InferContext& ctx) {
  if (!ctx.has_input(0)) node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs an input");
  DType t = require_float_input(ctx, 0);
  softmax_params(ctx.node(), ctx.opset(), ctx.input_shape(0));
  ctx.set_output(0, t, ctx.input_shape(0));
}

template <typename T, SoftmaxType kType>
RefKernel softmax_kernel(SoftmaxParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    if (p.n == 0) return;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < p.outer; ++o) {
      const T* xb = x + o * p.n * p.inner;
      T* yb = y + o * p.n * p.inner;
      // Column j of the (n, inner) block is one softmax; walking rows keeps accesses
      // contiguous when inner > 1.
      std::vector<T> best(xb, xb + p.inner);
      std::vector<int64_t> best_at(static_cast<size_t>(p.inner), 0);
      for (int64_t k = 1; k < p.n; ++k)
        for (int64_t j = 0; j < p.inner; ++j)
          if (xb[k * p.inner + j] > best[j]) {
            best[j] = xb[k * p.inner + j];
            best_at[j] = k;
          }
      if constexpr (kType == SoftmaxType::kHardmax) {
        for (int64_t k = 0; k < p.n; ++k)
          for (int64_t j = 0; j < p.inner; ++j) yb[k * p.inner + j] = best_at[j] == k ? 1 : 0;
      } else {
        std::vector<double> sum(static_cast<size_t>(p.inner), 0.0);
        for (int64_t k = 0; k < p.n; ++k)
          for (int64_t j = 0; j < p.inner; ++j) {
            T e = std::exp(xb[k * p.inner + j] - best[j]);
            if constexpr (kType == SoftmaxType::kSoftmax) yb[k * p.inner + j] = e;
            sum[j] += e;
          }
        for (int64_t k = 0; k < p.n; ++k)
          for (int64_t j = 0; j < p.inner; ++j) {
            T& v = yb[k * p.inner + j];
            if constexpr (kType == SoftmaxType::kSoftmax)
              v = static_cast<T>(v / sum[j]);
            else
              v = static_cast<T>(xb[k * p.inner + j] - best[j] - std::log(sum[j]));
          }
      }
    }
  };
}

template <SoftmaxType kType>
RefKernel make_softmax(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  SoftmaxParams p = softmax_params(node, g.opset, xv.shape);
  return dispatch_float(xv.dtype,
                        [&](auto tag) { return softmax_kernel<decltype(tag), kType>(p); });
}

// ---- Dropout: identity at inference. The optional mask is all "kept": true (bool) from
// opset 10, 1 of the input's type before.

bool dropout_mask_is_bool(int64_t opset) {
  return opset >= 10;
}

// Dropout in training mode is random unless the ratio is zero; decide from constants.
void check_dropout_inference(const InferContext& ctx) {
  const Node& node = ctx.node();
  if (!ctx.has_input(2)) return;
  const Tensor* training = ctx.input_constant(2);
  if (!training)
    node_fail(node, ErrorKind::kUnsupported,
              "training_mode is not a constant; only inference (training_mode=false) is "
              "supported");
  if (training->numel() != 1) ctx.fail("training_mode must be a scalar");
  if (training->get_as_int(0) == 0) return;
  const Tensor* ratio = ctx.input_constant(1);
  if (ratio && ratio->numel() == 1 && ratio->get_as_double(0) == 0.0) return;
  node_fail(node, ErrorKind::kUnsupported,
            "training_mode=true with a nonzero or unknown ratio is random; not supported");
}

void infer_dropout(InferContext& ctx) {
  const Node& node = ctx.node();
  if (!ctx.has_input(0)) node_fail(node, ErrorKind::kInvalidModel, "needs input data");
  DType t = ctx.input_dtype(0);
  if (!dtype_is_float(t))
    node_fail(node, ErrorKind::kUnsupported, "element type {} is not supported", dtype_name(t));
  check_dropout_inference(ctx);
  const Shape& x = ctx.input_shape(0);
  ctx.set_output(0, t, x);
  if (ctx.num_outputs() > 1) {
    bool bool_mask = dropout_mask_is_bool(ctx.opset());
    if (!bool_mask && !is_float_type(t) && output_used(node, 1))
      node_fail(node, ErrorKind::kUnsupported, "a {} mask is not supported", dtype_name(t));
    ctx.set_output(1, bool_mask ? DType::kBool : t, x);
  }
}

RefKernel make_dropout(const Graph& g, const Node& node) {
  (void)g;
  (void)node;
  return [](std::span<const Tensor> in, std::span<const Tensor> out) {
    if (out[0].raw() != in[0].raw()) std::memcpy(out[0].raw(), in[0].raw(), in[0].nbytes());
    if (out.size() < 2 || !out[1].defined()) return;
    const Tensor& mask = out[1];
    switch (mask.dtype()) {
      case DType::kBool:
        for (bool& m : mask.span<bool>()) m = true;
        break;
      case DType::kFloat32:
        for (float& m : mask.span<float>()) m = 1.0f;
        break;
      case DType::kFloat64:
        for (double& m : mask.span<double>()) m = 1.0;
        break;
      default:
        fail(ErrorKind::kInternal, "Dropout: unexpected mask type {}", dtype_name(mask.dtype()));
    }
  };
}

}  // namespace

void register_softmax_ops(OpRegistry& registry) {
  registry.add(
      {"Softmax", "", OpKind::kReduction, infer_softmax, make_softmax<SoftmaxType::kSoftmax>});
  registry.add({"LogSoftmax", "", OpKind::kReduction, infer_softmax,
                make_softmax<SoftmaxType::kLogSoftmax>});
  registry.add(
      {"Hardmax", "", OpKind::kOpaque, infer_softmax, make_softmax<SoftmaxType::kHardmax>});
  registry.add({"Dropout", "", OpKind::kOpaque, infer_dropout, make_dropout});
}

}  // namespace collage::ops::nn
