#include "backends/onednn/small_reduction.h"

#include <algorithm>
#include <numeric>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn {
namespace {

// Output elements per work item: enough that an item amortises its index arithmetic.
constexpr int64_t kElementsPerItem = 4096;

struct Plan {
  std::vector<int64_t> row_dims, row_in_strides;  // kept dims but the innermost, outer first
  int64_t inner = 1, inner_stride = 1;            // the innermost kept dim, in the input
  std::vector<int64_t> slices;                    // the input offset of each reduced position
  int64_t offset = 0;                             // the input descriptor's offset0
  float scale = 1.0f;
};

void reduce_row(const Plan& p, const float* in, float* __restrict out) {
  const int64_t n = p.inner, s = p.inner_stride;
  const float* __restrict first = in + p.slices[0];
  if (s == 1)
    for (int64_t i = 0; i < n; ++i) out[i] = first[i];
  else
    for (int64_t i = 0; i < n; ++i) out[i] = first[i * s];
  for (size_t r = 1; r < p.slices.size(); ++r) {
    const float* __restrict slice = in + p.slices[r];
    if (s == 1)
      for (int64_t i = 0; i < n; ++i) out[i] += slice[i];
    else
      for (int64_t i = 0; i < n; ++i) out[i] += slice[i * s];
  }
  if (p.scale != 1.0f)
    for (int64_t i = 0; i < n; ++i) out[i] *= p.scale;
}

void run_plan(const Plan& p, const float* from, float* to) {
  from += p.offset;
  const int64_t rows =
      std::accumulate(p.row_dims.begin(), p.row_dims.end(), int64_t{1}, std::multiplies<>());
  const int64_t rows_per_item = std::max<int64_t>(1, kElementsPerItem / p.inner);
  const int64_t items = (rows + rows_per_item - 1) / rows_per_item;
  auto item = [&](int64_t it) {
    const int64_t end = std::min(rows, (it + 1) * rows_per_item);
    for (int64_t row = it * rows_per_item; row < end; ++row) {
      int64_t at = 0;
      for (int64_t d = static_cast<int64_t>(p.row_dims.size()) - 1, rest = row; d >= 0; --d) {
        at += rest % p.row_dims[d] * p.row_in_strides[d];
        rest /= p.row_dims[d];
      }
      reduce_row(p, from + at, to + row * p.inner);
    }
  };
  for_each_item(items, item);
}

}  // namespace

std::optional<SmallReduction> small_reduction(const dnnl::memory::desc& in,
                                              const std::vector<int64_t>& axes, bool mean,
                                              bool keepdims) {
  const std::optional<Dims> plain = plain_strides(in);
  if (!plain || in.data.data_type != dnnl_f32) return std::nullopt;
  const Dims& strides = *plain;
  const Dims dims = in.dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<bool> reduced(dims.size(), false);
  int64_t count = 1;
  for (int64_t a : axes) {
    if (a < 0 || a >= rank) return std::nullopt;
    reduced[static_cast<size_t>(a)] = true;
    count *= dims[static_cast<size_t>(a)];
  }
  if (count < 1 || count > kMaxSmallReduction) return std::nullopt;
  // The kept dims of more than one element in the input's memory order (largest stride
  // first; ties by position).
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[static_cast<size_t>(d)] && dims[static_cast<size_t>(d)] > 1) kept.push_back(d);
  std::stable_sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) {
    return strides[static_cast<size_t>(a)] > strides[static_cast<size_t>(b)];
  });
  Plan plan;
  plan.offset = in.data.offset0;
  plan.scale = mean ? 1.0f / static_cast<float>(count) : 1.0f;
  for (size_t k = 0; k < kept.size(); ++k) {
    const auto d = static_cast<size_t>(kept[k]);
    if (k + 1 == kept.size()) {
      plan.inner = dims[d];
      plan.inner_stride = strides[d];
    } else {
      plan.row_dims.push_back(dims[d]);
      plan.row_in_strides.push_back(strides[d]);
    }
  }
  plan.slices = {0};
  for (int64_t a : axes) {
    const auto d = static_cast<size_t>(a);
    std::vector<int64_t> more;
    for (int64_t base : plan.slices)  // row-major over the reduced axes: the reference's order
      for (int64_t i = 0; i < dims[d]; ++i) more.push_back(base + i * strides[d]);
    plan.slices = std::move(more);
  }
  // The output: dense in the kept dims' order. A unit dim (a reduced one kept as 1, or one
  // of 1 already) takes the stride a row-major layout gives it, the next dim's stride times
  // its extent: kept dims in row-major order then give exactly the plain layout, which a
  // concat or a binary op beside a plain value takes as the same format.
  Dims all_strides(dims.size(), 1);
  int64_t stride = 1;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    all_strides[static_cast<size_t>(*it)] = stride;
    stride *= dims[static_cast<size_t>(*it)];
  }
  for (int64_t k = rank - 1; k >= 0; --k) {
    const auto d = static_cast<size_t>(k);
    if (!reduced[d] && dims[d] > 1) continue;
    all_strides[d] =
        d + 1 < dims.size() ? all_strides[d + 1] * (reduced[d + 1] ? 1 : dims[d + 1]) : 1;
  }
  Dims out_dims, out_strides;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (reduced[k] && !keepdims) continue;
    out_dims.push_back(reduced[k] ? 1 : dims[k]);
    out_strides.push_back(all_strides[k]);
  }
  if (out_dims.empty()) return std::nullopt;
  SmallReduction out;
  out.out = dnnl::memory::desc(out_dims, dnnl::memory::data_type::f32, out_strides);
  out.run = [plan = std::move(plan)](const float* from, float* to) { run_plan(plan, from, to); };
  return out;
}

}  // namespace collage::onednn
