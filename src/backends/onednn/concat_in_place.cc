#include "backends/onednn/concat_in_place.h"

#include <algorithm>
#include <set>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn {
namespace {

constexpr int64_t kChannelBlock = 16;  // nChw16c: the block oneDNN's f32 kernels use here

// A batch-1 float32 concatenation along channels of rank 3-5 whose result leaves nothing
// outside the region to bind: what a root may be.
bool channel_concat(const Graph& g, const Node& n) {
  if (n.op_type != "Concat" || !n.domain.empty() || n.outputs.size() != 1) return false;
  const Value& y = g.value(n.outputs[0]);
  const int64_t rank = static_cast<int64_t>(y.shape.size());
  if (!y.shape_known || rank < 3 || rank > 5 || y.dtype != DType::kFloat32) return false;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  return axis == 1 && y.shape[0] == 1 && !is_graph_output(g, n.outputs[0]);
}

// An input a root may hold: computed in the region (its producer writes the slice), float32,
// a whole number of channel blocks, not a region output (that is bound row-major).
bool placeable(const Graph& g, ValueId x) {
  if (x == kNoValue) return false;
  const Value& v = g.value(x);
  return v.producer >= 0 && !v.is_constant() && v.dtype == DType::kFloat32 && v.shape_known &&
         v.shape.size() >= 2 && v.shape[1] > 0 && v.shape[1] % kChannelBlock == 0 &&
         !is_graph_output(g, x);
}

}  // namespace

ConcatPlan plan_concats_in_place(const Graph& region, int min_concats) {
  ConcatPlan plan;
  std::vector<int> served;  // per root: the concatenations it serves
  for (size_t i = region.num_nodes(); i-- > 0;) {
    const Node& n = region.node(static_cast<NodeId>(i));
    if (!channel_concat(region, n)) continue;
    const ValueId y = n.outputs[0];
    const std::set<ValueId> distinct(n.inputs.begin(), n.inputs.end());
    const bool all_placeable = distinct.size() == n.inputs.size() &&
                               std::all_of(n.inputs.begin(), n.inputs.end(),
                                           [&](ValueId x) { return placeable(region, x); });
    if (!all_placeable) continue;
    const bool none_placed = std::none_of(n.inputs.begin(), n.inputs.end(),
                                          [&](ValueId x) { return plan.homes.count(x) != 0; });
    if (none_placed && !plan.homes.count(y)) {
      // A new root: this concatenation's inputs side by side.
      const size_t root = plan.roots.size();
      plan.roots.push_back(y);
      served.push_back(1);
      plan.homes[y] = {root, 0};
      int64_t offset = 0;
      for (ValueId x : n.inputs) {
        plan.homes[x] = {root, offset};
        offset += region.value(x).shape[1];
      }
      continue;
    }
    if (plan.homes.count(y)) continue;  // placed as a slice of a later root: copies into it
    // Already placed side by side in one root: this concatenation is that run of slices.
    const auto placed = plan.homes.find(n.inputs[0]);
    if (placed == plan.homes.end()) continue;
    const ConcatHome first = placed->second;
    int64_t offset = first.offset;
    bool contiguous = true;
    for (ValueId x : n.inputs) {
      auto it = plan.homes.find(x);
      contiguous = contiguous && it != plan.homes.end() && it->second.root == first.root &&
                   it->second.offset == offset;
      if (!contiguous) break;
      offset += region.value(x).shape[1];
    }
    if (!contiguous) continue;
    plan.homes[y] = first;
    ++served[first.root];
  }
  // Roots serving fewer concatenations than asked are dropped (their values copied as before).
  std::vector<size_t> renumbered(plan.roots.size(), SIZE_MAX);
  std::vector<ValueId> kept;
  for (size_t r = 0; r < plan.roots.size(); ++r)
    if (served[r] >= min_concats) {
      renumbered[r] = kept.size();
      kept.push_back(plan.roots[r]);
      plan.in_place += served[r];
    }
  plan.roots = kept;
  for (auto it = plan.homes.begin(); it != plan.homes.end();) {
    if (renumbered[it->second.root] == SIZE_MAX) {
      it = plan.homes.erase(it);
    } else {
      it->second.root = renumbered[it->second.root];
      ++it;
    }
  }
  return plan;
}

}  // namespace collage::onednn
