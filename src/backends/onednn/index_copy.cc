// Slices with other steps and Gathers of index lists as copies (index_copy.h says why).
#include "backends/onednn/index_copy.h"

#include <omp.h>

#include <cstring>
#include <memory>
#include <optional>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/kernels.h"
#include "ops/elementwise_util.h"
#include "ops/tensor_util.h"

namespace collage::onednn {
namespace {

using ops::elem::kParallelThreshold;

// The output as rows of `length` elements: row r reads the input from offset `from[r]` on,
// `stride` elements apart (1, -1 for a flip, any step).
struct Rows {
  int64_t length = 0;
  int64_t stride = 1;
  std::vector<int64_t> from;
};

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
}

std::optional<Rows> slice_rows(const Graph& g, const Node& n, bool table) {
  ops::SliceSpec spec;
  try {
    spec = ops::slice_spec(InferContext(g, n));
  } catch (const Error&) {
    return std::nullopt;  // starts/ends/axes/steps computed at run time
  }
  const Shape& in = g.value(n.input(0)).shape;
  if (in.empty() || spec.out.size() != in.size() || shape_numel(spec.out) == 0) return std::nullopt;
  const std::vector<int64_t> in_strides = strides_of(in);
  const size_t last = in.size() - 1;
  Rows rows;
  rows.length = spec.out[last];
  rows.stride = spec.step[last];
  if (!table) return rows;
  const int64_t count = shape_numel(spec.out) / rows.length;
  rows.from.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(last, 0);  // over the output's outer axes
  for (int64_t r = 0; r < count; ++r) {
    int64_t offset = spec.start[last];
    for (size_t d = 0; d < last; ++d)
      offset += (spec.start[d] + index[d] * spec.step[d]) * in_strides[d];
    rows.from.push_back(offset);
    for (size_t d = last; d-- > 0;) {
      if (++index[d] < spec.out[d]) break;
      index[d] = 0;
    }
  }
  return rows;
}

std::optional<Rows> gather_rows(const Graph& g, const Node& n, bool table) {
  const ValueId indices = n.input(1);
  if (indices == kNoValue || !g.value(indices).is_constant()) return std::nullopt;
  const Shape& in = g.value(n.input(0)).shape;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(in.size());
  if (in.empty() || axis < 0 || axis >= static_cast<int64_t>(in.size())) return std::nullopt;
  std::vector<int64_t> list = g.value(indices).constant.to_int_vector();
  if (list.empty()) return std::nullopt;
  for (int64_t& i : list) {
    if (i < 0) i += in[axis];
    if (i < 0 || i >= in[axis]) return std::nullopt;  // the reference reports it
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in[d];
  for (size_t d = axis + 1; d < in.size(); ++d) inner *= in[d];
  Rows rows;
  rows.length = inner;
  if (!table) return rows;
  rows.from.reserve(static_cast<size_t>(outer) * list.size());
  for (int64_t o = 0; o < outer; ++o)
    for (const int64_t i : list) rows.from.push_back((o * in[axis] + i) * inner);
  return rows;
}

// The rows of Slice or Gather `n` when the step takes it; without `table`, only whether it
// does (region_node asks of every node: no offsets computed).
std::optional<Rows> rows_of(const Graph& g, const Node& n, bool table) {
  if ((n.op_type != "Slice" && n.op_type != "Gather") || !n.domain.empty() ||
      n.outputs.size() != 1 || !is_f32(g, n.input(0)) || !g.value(n.input(0)).shape_known ||
      !is_f32(g, n.outputs[0]) || !g.value(n.outputs[0]).shape_known || layout_head(g, n))
    return std::nullopt;
  return n.op_type == "Slice" ? slice_rows(g, n, table) : gather_rows(g, n, table);
}

dnnl_status_t copy_rows(const Rows& rows, const float* x, float* y) {
  const int64_t count = static_cast<int64_t>(rows.from.size()), length = rows.length;
  const int team =
      omp_in_parallel() || count * length < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t r = 0; r < count; ++r) {
    const float* src = x + rows.from[r];
    float* dst = y + r * length;
    if (rows.stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(length) * sizeof(float));
    } else {
      const int64_t s = rows.stride;
      for (int64_t j = 0; j < length; ++j) dst[j] = src[j * s];
    }
  }
  return dnnl_success;
}

}  // namespace

bool index_copy_takes(const Graph& g, const Node& n) {
  return rows_of(g, n, false).has_value();
}

void emit_index_copy(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1) fail(ErrorKind::kUnsupported, "onednn: an index copy fuses nothing");
  const Node& n = sub.node(0);
  std::optional<Rows> rows = rows_of(sub, n, true);
  if (!rows) fail(ErrorKind::kUnsupported, "onednn: {} is no constant index copy", n.op_type);
  const ValueId x = n.input(0), y = n.outputs[0];
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: copied value is not a kernel input");
  const Shape& in = sub.value(x).shape;
  const Shape& out = sub.value(y).shape;
  const dnnl::memory src = values.read(x, plain_md(in));
  if (!flat_f32(src, shape_numel(in)))
    fail(ErrorKind::kUnsupported, "onednn: copied value is no flat array");
  dnnl::memory dst = values.destination(y, plain_md(out));
  if (!flat_f32(dst, shape_numel(out))) dst = values.fresh_destination(y, plain_md(out));
  auto table = std::make_shared<const Rows>(std::move(*rows));
  values.program().add_unary_custom(
      kIndexCopyStep, [table](const float* x, float* y) { return copy_rows(*table, x, y); }, src,
      dst, dnnl::primitive::kind::reorder);
  values.produced(y, dst);
}

}  // namespace collage::onednn
