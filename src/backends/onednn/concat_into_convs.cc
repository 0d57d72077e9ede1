// Concatenations read only by convolutions, computed as sums of per-part convolutions
// (concat_into_convs.h says why).
#include "backends/onednn/concat_into_convs.h"

#include <algorithm>
#include <cstring>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/graph_rewrite.h"

namespace collage::onednn {
namespace {

// Two parts: the second conv adds the first's output as its sum post-op. With three, the
// second sum had to be a binary post-op of a full-shape tensor (refused, bind_post_ops) or a
// binary primitive: a pass over the output like the concatenation's copy.
constexpr size_t kMostParts = 2;
constexpr int64_t kChannelBlock = 16;

// A float32 value whose shape is known (the rewrites build shapes from it).
bool known_f32(const Graph& g, ValueId v) {
  return is_f32(g, v) && g.value(v).shape_known;
}

// Whether reader `r` of concatenation `v` can be split: a group-1 Conv reading `v` once, as
// its input, with constant float32 weights (and bias).
bool splittable_reader(const Graph& g, const Node& r, ValueId v) {
  if (!r.domain.empty() || r.op_type != "Conv" || r.input(0) != v || r.outputs.size() != 1 ||
      r.attr_int("group", 1) != 1 || !known_f32(g, r.outputs[0]))
    return false;
  for (size_t i = 1; i < r.inputs.size(); ++i)
    if (r.inputs[i] == v) return false;
  const Value& w = g.value(r.input(1));
  if (!w.is_constant() || w.dtype != DType::kFloat32) return false;
  const ValueId b = r.input(2);
  return b == kNoValue || (g.value(b).is_constant() && g.value(b).dtype == DType::kFloat32);
}

// Whether the inputs of Concat node `c` are parts to compute with apart: 2 float32 values
// of whole 16-channel blocks (on the channel axis: channel_concat() checks), none a constant.
bool splittable_parts(const Graph& g, const Node& c) {
  if (c.inputs.size() < 2 || c.inputs.size() > kMostParts) return false;
  return std::all_of(c.inputs.begin(), c.inputs.end(), [&](ValueId in) {
    return known_f32(g, in) && !g.value(in).is_constant() &&
           g.value(in).shape.size() == g.value(c.outputs[0]).shape.size() &&
           g.value(in).shape[1] % kChannelBlock == 0;
  });
}

// Whether `c` is a channel Concat of parts splittable_parts() takes, its output float32.
bool channel_concat(const Graph& g, const Node& c) {
  if (!c.domain.empty() || c.op_type != "Concat" || c.outputs.size() != 1 ||
      !known_f32(g, c.outputs[0]))
    return false;
  const int64_t rank = static_cast<int64_t>(g.value(c.outputs[0]).shape.size());
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  return rank >= 3 && rank <= 5 && axis == 1 && splittable_parts(g, c);
}

// Whether `readers` (of a concatenation `v`) are convolutions that can be split.
bool read_by_convs_alone(const Graph& g, ValueId v, const std::vector<NodeId>& readers) {
  return !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
    return splittable_reader(g, g.node(r), v);
  });
}

// Input channels [c0, c0 + count) of weights [K, C, S...].
Tensor weight_slice(const Tensor& w, int64_t c0, int64_t count) {
  Shape shape = w.shape();
  const int64_t k = shape[0], c = shape[1];
  int64_t spatial = 1;
  for (size_t i = 2; i < shape.size(); ++i) spatial *= shape[i];
  shape[1] = count;
  Tensor out(DType::kFloat32, shape);
  const float* from = w.data<float>();
  float* to = out.data<float>();
  for (int64_t o = 0; o < k; ++o)
    std::memcpy(to + o * count * spatial, from + (o * c + c0) * spatial,
                static_cast<size_t>(count * spatial) * sizeof(float));
  return out;
}

// `region` with each channel Concat that `rewrite` takes rewritten: rewrite(g, id, concat,
// readers) appends the nodes that replace concatenation `id` (and readers of it) and returns
// the nodes they replace (none: not taken).
template <typename Rewrite>
Graph rewrite_concats(const Graph& region, const Rewrite& rewrite) {
  const std::vector<std::vector<NodeId>> readers = region.consumers();
  return rewrite_nodes(region, [&](Graph& g, NodeId id, const Node& concat) {
    if (!channel_concat(g, concat) || is_graph_output(g, concat.outputs[0]))
      return std::vector<NodeId>{};
    return rewrite(g, id, concat, readers[concat.outputs[0]]);
  });
}

// Each channel Concat that a pooling alone reads, pooled part by part and then concatenated:
// pool(concat(a, b)) = concat(pool(a), pool(b)) (a pooling works per channel), so that the
// concatenation, now of the pooled parts, may be split into the convolutions reading it
// (SqueezeNet pools two of its eight concatenations first).
std::vector<NodeId> pool_parts(Graph& g, NodeId id, const Node& concat,
                               const std::vector<NodeId>& readers) {
  if (readers.size() != 1) return {};
  const Node pool = g.node(readers[0]);
  if (!pool.domain.empty() || (pool.op_type != "MaxPool" && pool.op_type != "AveragePool") ||
      pool.outputs.size() != 1 || !known_f32(g, pool.outputs[0]))
    return {};
  Node pooled_concat = concat;
  pooled_concat.inputs.clear();
  for (size_t p = 0; p < concat.inputs.size(); ++p) {
    Node part = pool;
    part.name = pool.name + "/part" + std::to_string(p);
    part.inputs = {concat.inputs[p]};
    Shape shape = g.value(pool.outputs[0]).shape;
    shape[1] = g.value(concat.inputs[p]).shape[1];
    part.outputs = {g.add_value(part.name + "/Y", DType::kFloat32, shape, true)};
    g.add_node(part);
    pooled_concat.inputs.push_back(part.outputs[0]);
  }
  pooled_concat.outputs = {pool.outputs[0]};
  g.add_node(pooled_concat);
  return {id, readers[0]};
}

// Each reader of a Concat that convs alone read (read_by_convs_alone) as one conv per part and the
// Adds summing them into the reader's output.
std::vector<NodeId> split_into_convs(Graph& g, NodeId id, const Node& concat,
                                     const std::vector<NodeId>& readers) {
  if (!read_by_convs_alone(g, concat.outputs[0], readers)) return {};
  std::vector<NodeId> replaced = {id};
  for (NodeId r : readers) {
    const Node reader = g.node(r);
    // Copies: adding values below moves the graph's values.
    const Tensor w = g.value(reader.input(1)).constant;
    const Shape y_shape = g.value(reader.outputs[0]).shape;
    ValueId sum = kNoValue;
    int64_t c0 = 0;
    for (size_t p = 0; p < concat.inputs.size(); ++p) {
      const ValueId part = concat.inputs[p];
      const int64_t channels = g.value(part).shape[1];
      Node conv = reader;
      conv.name = reader.name + "/part" + std::to_string(p);
      conv.inputs = {part, g.add_constant(conv.name + "/W", weight_slice(w, c0, channels))};
      if (p == 0 && reader.input(2) != kNoValue) conv.inputs.push_back(reader.input(2));
      const bool last = p + 1 == concat.inputs.size();
      const ValueId out =
          g.add_value(conv.name + "/Y", DType::kFloat32, y_shape, /*shape_known=*/true);
      conv.outputs = {out};
      g.add_node(conv);
      if (sum == kNoValue) {
        sum = out;
      } else {
        Node add;
        add.name = reader.name + "/sum" + std::to_string(p);
        add.op_type = "Add";
        add.inputs = {out, sum};  // the conv first: its group takes the sum as a post-op
        add.outputs = {last ? reader.outputs[0]
                            : g.add_value(add.name + "/Y", DType::kFloat32, y_shape, true)};
        g.add_node(add);
        sum = add.outputs[0];
      }
      c0 += channels;
    }
    replaced.push_back(r);
  }
  return replaced;
}

}  // namespace

Graph split_concats_into_convs(const Graph& region) {
  return rewrite_concats(rewrite_concats(region, pool_parts), split_into_convs);
}

}  // namespace collage::onednn
