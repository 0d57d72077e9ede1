// A Gather of constant indices along one axis, and a Tile of constant repeats, lowered on
// import to Slices and a Concat: copies of constant positions, which every fast backend runs
// (onednn and onednn-graph as reorders and a concat, inside regions too), where the ops
// themselves only had the reference kernel (onednn-graph takes a Gather of one index alone),
// and so cut the graph-level region around them. PyTorch exports indexing with a list
// (`x[:, [2, 1, 0]]`, an RGB/BGR swap or a channel permutation, `index_select`) as such a
// Gather, and `Tensor.repeat` as a Tile.
#include <map>

#include "ir/model_passes.h"

namespace collage {
namespace {

// Each Gather or Tile lowered makes at most this many Slices or Concat inputs per axis: past
// it the op stays one node (each piece is a node of its own, and the search's work grows with
// the nodes).
constexpr size_t kMaxPieces = 8;

// A Gather of a 1-D constant index list along its axis: the runs of consecutive indices, each
// a Slice (one Slice per distinct run), joined by a Concat; one run is the Slice alone.
bool lower_gather(Graph& graph, const Node& node) {
  const ValueId data = node.input(0), indices = node.input(1), y = node.outputs[0];
  if (indices == kNoValue || !graph.value(indices).is_constant() ||
      graph.value(indices).shape.size() != 1)
    return false;  // a scalar index is a cut already; index matrices add dims
  const Shape& shape = graph.value(data).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  std::vector<int64_t> index = graph.value(indices).constant.to_int_vector();
  if (index.empty()) return false;
  for (int64_t& i : index) {
    if (i < 0) i += shape[axis];
    if (i < 0 || i >= shape[axis]) return false;  // the reference kernel reports it
  }
  std::vector<std::pair<int64_t, int64_t>> runs;  // [start, end)
  for (const int64_t i : index) {
    if (!runs.empty() && runs.back().second == i)
      ++runs.back().second;
    else
      runs.push_back({i, i + 1});
  }
  if (runs.size() > kMaxPieces) return false;
  int count = 0;
  if (runs.size() == 1) {
    append_axis_slice(graph, node.name, count, data, axis, runs[0].first, runs[0].second, y);
    return true;
  }
  std::map<std::pair<int64_t, int64_t>, ValueId> sliced;
  std::vector<ValueId> parts;
  for (const auto& run : runs) {
    auto [it, added] = sliced.try_emplace(run, kNoValue);
    if (added)
      it->second = append_axis_slice(graph, node.name, count, data, axis, run.first, run.second);
    parts.push_back(it->second);
  }
  append_lowered_node(graph, node.name, count, "Concat", parts,
                      {{"axis", Attribute::from_int(axis)}}, y);
  return true;
}

// A Tile of constant repeats: per repeated axis, a Concat of that many copies.
bool lower_tile(Graph& graph, const Node& node) {
  const ValueId repeats = node.input(1);
  if (repeats == kNoValue || !graph.value(repeats).is_constant()) return false;
  const std::vector<int64_t> times = graph.value(repeats).constant.to_int_vector();
  const size_t rank = graph.value(node.input(0)).shape.size();
  if (times.size() != rank) return false;
  std::vector<size_t> tiled;
  for (size_t d = 0; d < rank; ++d) {
    if (times[d] < 1 || static_cast<size_t>(times[d]) > kMaxPieces) return false;
    if (times[d] > 1) tiled.push_back(d);
  }
  if (tiled.empty()) return false;  // a copy: remove_identities' business
  int count = 0;
  ValueId value = node.input(0);
  for (const size_t d : tiled) {
    const std::vector<ValueId> copies(static_cast<size_t>(times[d]), value);
    const NodeId id = append_lowered_node(graph, node.name, count, "Concat", copies,
                                          {{"axis", Attribute::from_int(static_cast<int64_t>(d))}},
                                          d == tiled.back() ? node.outputs[0] : kNoValue);
    value = graph.node(id).outputs[0];
  }
  return true;
}

}  // namespace

void lower_gathers_and_tiles(Graph& graph) {
  lower_nodes(graph, [](Graph& g, const Node& node) {
    if (!node.domain.empty() || node.outputs.size() != 1 || node.inputs.size() != 2) return false;
    const Value& x = g.value(node.input(0));
    // A constant's Gather or Tile is folded on import instead.
    if (x.dtype != DType::kFloat32 || !x.shape_known || x.shape.empty() || x.is_constant() ||
        !g.value(node.outputs[0]).shape_known)
      return false;
    if (node.op_type == "Gather") return lower_gather(g, node);
    if (node.op_type == "Tile") return lower_tile(g, node);
    return false;
  });
}

}  // namespace collage
