#include "backends/onednn/dense_concat.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn {
namespace {

// Floats per work item where the runs are long (a row-major join on the channels): 64 KiB.
constexpr int64_t kLongRunPiece = 16 * 1024;
// Output floats per work item where the runs are short (channels-last): ~16 KiB of pixels.
constexpr int64_t kShortRunItem = 4 * 1024;

// The dims of `md` in memory order (largest stride first) when it is dense float32 with
// plain strides and no offset; empty otherwise.
std::vector<int> memory_order(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  const std::optional<Dims> strides = plain_strides(md);
  if (!strides || d.data_type != dnnl_f32 || d.offset0 != 0 || d.ndims == 0) return {};
  int64_t numel = 1;
  for (int k = 0; k < d.ndims; ++k) numel *= d.dims[k];
  if (static_cast<int64_t>(md.get_size()) != numel * static_cast<int64_t>(sizeof(float))) return {};
  std::vector<int> order(static_cast<size_t>(d.ndims));
  std::iota(order.begin(), order.end(), 0);
  // Ties (dims of 1) by position: what matters is that the dims of more than one agree.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return (*strides)[a] > (*strides)[b]; });
  std::vector<int> wide;
  for (int k : order)
    if (d.dims[k] > 1) wide.push_back(k);
  return wide;
}

}  // namespace

std::optional<DenseConcat> dense_concat(const std::vector<dnnl::memory::desc>& parts,
                                        const dnnl::memory::desc& out, int axis) {
  if (parts.empty()) return std::nullopt;
  const dnnl_memory_desc_t& o = out.data;
  if (axis < 0 || axis >= o.ndims) return std::nullopt;
  // The order of the output's dims of more than one element; each part's must be the same
  // less its own dims of one.
  const std::vector<int> order = memory_order(out);
  if (order.empty()) return std::nullopt;
  for (const dnnl::memory::desc& p : parts) {
    const std::vector<int> po = memory_order(p);
    std::vector<int> expected;
    for (int k : order)
      if (p.data.dims[k] > 1) expected.push_back(k);
    if (po != expected || p.data.ndims != o.ndims) return std::nullopt;
  }
  // outer: the output's dims before the axis in memory order; a part's run: its dims from
  // the axis on.
  int64_t outer = 1;
  bool before = true;
  for (int k : order) {
    if (k == axis) before = false;
    if (before) outer *= o.dims[k];
  }
  if (before) return std::nullopt;  // the axis has one element in the output: no join
  std::vector<int64_t> runs;
  for (const dnnl::memory::desc& p : parts) {
    int64_t run = 1;
    bool from_axis = false;
    for (int k : order) {
      if (k == axis) from_axis = true;
      if (from_axis) run *= p.data.dims[k];
    }
    runs.push_back(run);
  }
  const int64_t out_run = std::accumulate(runs.begin(), runs.end(), int64_t{0});
  std::vector<int64_t> starts(runs.size(), 0);
  for (size_t i = 1; i < runs.size(); ++i) starts[i] = starts[i - 1] + runs[i - 1];
  const int64_t shortest = *std::min_element(runs.begin(), runs.end());
  if (shortest >= kLongRunPiece / 4) {
    // Long runs: each (outer index, part) run cut into pieces of kLongRunPiece floats.
    struct Piece {
      size_t part;
      int64_t from, to, length;
    };
    std::vector<Piece> pieces;
    for (int64_t i = 0; i < outer; ++i)
      for (size_t p = 0; p < runs.size(); ++p)
        for (int64_t at = 0; at < runs[p]; at += kLongRunPiece)
          pieces.push_back({p, i * runs[p] + at, i * out_run + starts[p] + at,
                            std::min(kLongRunPiece, runs[p] - at)});
    return [pieces = std::move(pieces)](const std::vector<const float*>& in, float* y) {
      for_each_item(static_cast<int64_t>(pieces.size()), [&](int64_t i) {
        const Piece& c = pieces[static_cast<size_t>(i)];
        std::memcpy(y + c.to, in[c.part] + c.from, static_cast<size_t>(c.length) * sizeof(float));
      });
    };
  }
  // Short runs: blocks of outer indices, each joining its parts' runs in turn.
  const int64_t per_item = std::max<int64_t>(1, kShortRunItem / out_run);
  const int64_t items = (outer + per_item - 1) / per_item;
  return [runs, starts, out_run, outer, per_item, items](const std::vector<const float*>& in,
                                                         float* y) {
    for_each_item(items, [&](int64_t item) {
      const int64_t end = std::min(outer, (item + 1) * per_item);
      for (int64_t i = item * per_item; i < end; ++i)
        for (size_t p = 0; p < runs.size(); ++p)
          std::memcpy(y + i * out_run + starts[p], in[p] + i * runs[p],
                      static_cast<size_t>(runs[p]) * sizeof(float));
    });
  };
}

}  // namespace collage::onednn
