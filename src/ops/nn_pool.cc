// Pooling: MaxPool, AveragePool, LpPool over 1-3 spatial axes (one 3-D loop nest serves
// all ranks) and their Global* forms.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/nn_util.h"

namespace collage::ops::nn {
namespace {

enum class PoolType { kMax, kAverage, kLp };

struct PoolParams {
  Window win;          // 3-D
  int64_t planes = 0;  // N * C
  bool count_include_pad = false;
  bool column_major_indices = false;  // MaxPool storage_order = 1
  int64_t p = 2;                      // LpPool
};

bool pool_type_allows(PoolType type, DType t) {
  if (is_float_type(t)) return true;
  // MaxPool (opset 12) also takes 8-bit integers; comparisons need no arithmetic type.
  return type == PoolType::kMax && (t == DType::kInt8 || t == DType::kUInt8);
}

void check_pool_input(const Node& node, PoolType type, DType t, const Shape& x, size_t min_rank) {
  if (!pool_type_allows(type, t))
    node_fail(node, ErrorKind::kUnsupported, "element type {} is not supported", dtype_name(t));
  if (x.size() < min_rank)
    node_fail(node, ErrorKind::kShape, "input must have rank >= {} (N, C, spatial...), got {}",
              min_rank, shape_to_string(x));
}

int64_t lp_order(const Node& node) {
  // LpPool-1 had a float p; later versions an int. Only integral orders are supported.
  double p = 2;
  auto it = node.attrs.find("p");
  if (it != node.attrs.end())
    p = it->second.type == Attribute::Type::kFloat ? it->second.f
                                                   : static_cast<double>(it->second.i);
  if (p < 1 || p != std::floor(p) || p > 64)
    node_fail(node, ErrorKind::kUnsupported, "p = {} is not supported (integers 1..64 only)", p);
  return static_cast<int64_t>(p);
}

PoolParams pool_params(const Node& node, PoolType type, DType t, const Shape& x) {
  check_pool_input(node, type, t, x, 3);
  if (x.size() > 5)
    node_fail(node, ErrorKind::kUnsupported, "only 1-D to 3-D pooling is supported, got {}",
              shape_to_string(x));
  size_t nd = x.size() - 2;
  PoolParams p;
  bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  p.win =
      forward_window(node, Shape(x.begin() + 2, x.end()), pool_kernel_shape(node, nd), ceil_mode);
  p.planes = x[0] * x[1];
  p.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  int64_t storage_order = node.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1)
    node_fail(node, ErrorKind::kInvalidModel, "storage_order must be 0 or 1");
  p.column_major_indices = storage_order == 1;
  if (type == PoolType::kLp) p.p = lp_order(node);
  return p;
}

template <PoolType kType>
void infer_pool(InferContext& ctx) {
  if (!ctx.has_input(0)) node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs input X");
  DType t = ctx.input_dtype(0);
  PoolParams p = pool_params(ctx.node(), kType, t, ctx.input_shape(0));
  Shape out{ctx.input_shape(0)[0], ctx.input_shape(0)[1]};
  out.insert(out.end(), p.win.out.begin(), p.win.out.end());
  ctx.set_output(0, t, out);
  if (kType == PoolType::kMax && ctx.num_outputs() > 1) ctx.set_output(1, DType::kInt64, out);
}

// The in-bounds taps of one window: along each axis, tap k reads input coordinate
// origin + k * dilation for k in [range.lo, range.hi).
struct Taps {
  Range r[3];
  int64_t origin[3];
  int64_t count() const { return (r[0].hi - r[0].lo) * (r[1].hi - r[1].lo) * (r[2].hi - r[2].lo); }
};

// Calls visit(plane, out_offset_in_plane, taps) for every output element.
template <typename F>
void for_each_window(const PoolParams& p, F&& visit) {
  const Window& w = p.win;
  const int64_t out_plane = w.out[0] * w.out[1] * w.out[2];
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    int64_t o = 0;
    for (int64_t oz = 0; oz < w.out[0]; ++oz)
      for (int64_t oy = 0; oy < w.out[1]; ++oy)
        for (int64_t ox = 0; ox < w.out[2]; ++ox, ++o) {
          Taps taps;
          const int64_t pos[3] = {oz, oy, ox};
          for (int a = 0; a < 3; ++a) {
            taps.origin[a] = pos[a] * w.stride[a] - w.pad_begin[a];
            taps.r[a] = valid_range(taps.origin[a], w.dilation[a], w.in[a], w.kernel[a]);
          }
          visit(plane, plane * out_plane + o, taps);
        }
  }
}

template <typename T>
RefKernel max_pool_kernel(PoolParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const Window& w = p.win;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    int64_t* indices = out.size() > 1 && out[1].defined() ? out[1].data<int64_t>() : nullptr;
    const int64_t in_plane = w.in[0] * w.in[1] * w.in[2];
    for_each_window(p, [&](int64_t plane, int64_t o, const Taps& t) {
      const T* xp = x + plane * in_plane;
      T best = std::numeric_limits<T>::lowest();
      int64_t bz = 0, by = 0, bx = 0;
      bool found = false;
      for (int64_t kz = t.r[0].lo; kz < t.r[0].hi; ++kz) {
        const int64_t iz = t.origin[0] + kz * w.dilation[0];
        for (int64_t ky = t.r[1].lo; ky < t.r[1].hi; ++ky) {
          const int64_t iy = t.origin[1] + ky * w.dilation[1];
          const T* row = xp + (iz * w.in[1] + iy) * w.in[2];
          for (int64_t kx = t.r[2].lo; kx < t.r[2].hi; ++kx) {
            const int64_t ix = t.origin[2] + kx * w.dilation[2];
            if (!found || row[ix] > best) {
              best = row[ix];
              bz = iz, by = iy, bx = ix;
              found = true;
            }
          }
        }
      }
      y[o] = best;
      if (indices) {
        int64_t spatial = p.column_major_indices ? (bx * w.in[1] + by) * w.in[0] + bz
                                                 : (bz * w.in[1] + by) * w.in[2] + bx;
        indices[o] = plane * in_plane + spatial;
      }
    });
  };
}

// AveragePool and LpPool: both sum a function of the taps, then finish.
template <typename T, PoolType kType>
RefKernel sum_pool_kernel(PoolParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const Window& w = p.win;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    const int64_t in_plane = w.in[0] * w.in[1] * w.in[2];
    for_each_window(p, [&](int64_t plane, int64_t o, const Taps& t) {
      const T* xp = x + plane * in_plane;
      T sum = 0;
      for (int64_t kz = t.r[0].lo; kz < t.r[0].hi; ++kz) {
        const int64_t iz = t.origin[0] + kz * w.dilation[0];
        for (int64_t ky = t.r[1].lo; ky < t.r[1].hi; ++ky) {
          const int64_t iy = t.origin[1] + ky * w.dilation[1];
          const T* row = xp + (iz * w.in[1] + iy) * w.in[2];
          for (int64_t kx = t.r[2].lo; kx < t.r[2].hi; ++kx) {
            const T v = row[t.origin[2] + kx * w.dilation[2]];
            if constexpr (kType == PoolType::kLp)
              sum += static_cast<T>(std::pow(std::abs(v), static_cast<T>(p.p)));
            else
              sum += v;
          }
        }
      }
      if constexpr (kType == PoolType::kLp) {
        y[o] = static_cast<T>(std::pow(sum, T(1) / static_cast<T>(p.p)));
      } else {
        int64_t count = t.count();
        if (p.count_include_pad) {
          // Taps in the padding count too, but not those past the end padding (ceil_mode).
          count = 1;
          for (int a = 0; a < 3; ++a) {
            Range r = valid_range(t.origin[a] + w.pad_begin[a], w.dilation[a],
                                  w.in[a] + w.pad_begin[a] + w.pad_end[a], w.kernel[a]);
            count *= r.hi - r.lo;
          }
        }
        y[o] = count > 0 ? sum / static_cast<T>(count) : T(0);
      }
    });
  };
}

template <PoolType kType>
RefKernel make_pool(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  PoolParams p = pool_params(node, kType, xv.dtype, xv.shape);
  p.win = p.win.as_3d();
  if constexpr (kType == PoolType::kMax) {
    if (xv.dtype == DType::kInt8) return max_pool_kernel<int8_t>(p);
    if (xv.dtype == DType::kUInt8) return max_pool_kernel<uint8_t>(p);
    return dispatch_float(xv.dtype, [&](auto tag) { return max_pool_kernel<decltype(tag)>(p); });
  } else {
    return dispatch_float(xv.dtype,
                          [&](auto tag) { return sum_pool_kernel<decltype(tag), kType>(p); });
  }
}

// ---- Global pools: one output per (n, c) plane, spatial axes kept as size 1.

template <PoolType kType>
void infer_global_pool(InferContext& ctx) {
  if (!ctx.has_input(0)) node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs input X");
  DType t = ctx.input_dtype(0);
  const Shape& x = ctx.input_shape(0);
  check_pool_input(ctx.node(), kType, t, x, 2);
  if (kType == PoolType::kLp) lp_order(ctx.node());
  if (dims_product(x, 2, x.size()) == 0)
    ctx.fail("cannot pool over an empty spatial extent {}", shape_to_string(x));
  Shape out(x.size(), 1);
  out[0] = x[0];
  out[1] = x[1];
  ctx.set_output(0, t, out);
}

template <typename T, PoolType kType>
RefKernel global_pool_kernel(int64_t planes, int64_t plane_size, int64_t p) {
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < planes; ++i) {
      const T* xp = x + i * plane_size;
      if constexpr (kType == PoolType::kMax) {
        T best = xp[0];
        for (int64_t j = 1; j < plane_size; ++j) best = std::max(best, xp[j]);
        y[i] = best;
      } else if constexpr (kType == PoolType::kAverage) {
        T sum = 0;
        for (int64_t j = 0; j < plane_size; ++j) sum += xp[j];
        y[i] = sum / static_cast<T>(plane_size);
      } else {
        T sum = 0;
        for (int64_t j = 0; j < plane_size; ++j)
          sum += static_cast<T>(std::pow(std::abs(xp[j]), static_cast<T>(p)));
        y[i] = static_cast<T>(std::pow(sum, T(1) / static_cast<T>(p)));
      }
    }
  };
}

template <PoolType kType>
RefKernel make_global_pool(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const int64_t planes = xv.shape[0] * xv.shape[1];
  const int64_t plane_size = dims_product(xv.shape, 2, xv.shape.size());
  const int64_t p = kType == PoolType::kLp ? lp_order(node) : 2;
  if constexpr (kType == PoolType::kMax) {
    if (xv.dtype == DType::kInt8) return global_pool_kernel<int8_t, kType>(planes, plane_size, p);
    if (xv.dtype == DType::kUInt8) return global_pool_kernel<uint8_t, kType>(planes, plane_size, p);
  }
  return dispatch_float(xv.dtype, [&](auto tag) {
    return global_pool_kernel<decltype(tag), kType>(planes, plane_size, p);
  });
}

}  // namespace

void register_pool_ops(OpRegistry& registry) {
  registry.add(
      {"MaxPool", "", OpKind::kOpaque, infer_pool<PoolType::kMax>, make_pool<PoolType::kMax>});
  registry.add({"AveragePool", "", OpKind::kOpaque, infer_pool<PoolType::kAverage>,
                make_pool<PoolType::kAverage>});
  registry.add(
      {"LpPool", "", OpKind::kOpaque, infer_pool<PoolType::kLp>, make_pool<PoolType::kLp>});
  registry.add({"GlobalMaxPool", "", OpKind::kOpaque, infer_global_pool<PoolType::kMax>,
                make_global_pool<PoolType::kMax>});
  registry.add({"GlobalAveragePool", "", OpKind::kOpaque, infer_global_pool<PoolType::kAverage>,
                make_global_pool<PoolType::kAverage>});
  registry.add({"GlobalLpPool", "", OpKind::kOpaque, infer_global_pool<PoolType::kLp>,
                make_global_pool<PoolType::kLp>});
}

}  // namespace collage::ops::nn
