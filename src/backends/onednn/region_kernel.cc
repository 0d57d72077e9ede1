#include "backends/onednn/region_kernel.h"

#include <omp.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/ranges.h>

#include "backends/onednn/concat_in_place.h"
#include "backends/onednn/concat_into_convs.h"
#include "backends/onednn/conv1d_as_2d.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/expand_kernel.h"
#include "backends/onednn/grid_sample_kernel.h"
#include "backends/onednn/group_norm.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/index_copy.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/lane_memo.h"
#include "backends/onednn/masked_select.h"
#include "backends/onednn/recurrent_kernel.h"
#include "backends/onednn/squeeze_excite.h"
#include "backends/onednn/unary_math.h"

namespace collage::onednn {
namespace {

// The conv algorithms of `region`'s nodes (by index) carried over to `rewritten`, its copy
// with duplicates merged and pads folded (both keep the remaining nodes' order and names): by
// name where the names tell nodes apart, by index where nothing was removed, else none (the
// direct algorithm: slower at worst, never wrong).
std::vector<ConvAlgorithm> by_name(const Graph& region,
                                   const std::vector<ConvAlgorithm>& algorithms,
                                   const Graph& rewritten) {
  if (algorithms.empty()) return {};
  if (rewritten.num_nodes() == region.num_nodes()) return algorithms;
  std::map<std::string, ConvAlgorithm> chosen;
  std::set<std::string> names;
  for (size_t i = 0; i < region.num_nodes(); ++i) {
    const std::string& name = region.node(static_cast<NodeId>(i)).name;
    if (name.empty() || !names.insert(name).second) return {};
    if (i < algorithms.size() && algorithms[i] != ConvAlgorithm::kDirect)
      chosen[name] = algorithms[i];
  }
  std::vector<ConvAlgorithm> out(rewritten.num_nodes(), ConvAlgorithm::kDirect);
  for (size_t i = 0; i < rewritten.num_nodes(); ++i) {
    auto it = chosen.find(rewritten.node(static_cast<NodeId>(i)).name);
    if (it != chosen.end()) out[i] = it->second;
  }
  return out;
}

// A head and the tail steps that may follow it, longest first tried.
struct Group {
  NodeId head = -1;
  std::vector<std::vector<NodeId>> steps;

  std::vector<NodeId> nodes(size_t num_steps) const {
    std::vector<NodeId> out = {head};
    for (size_t i = 0; i < num_steps; ++i) out.insert(out.end(), steps[i].begin(), steps[i].end());
    std::sort(out.begin(), out.end());
    return out;
  }
};

class RegionCompiler {
 public:
  // Repeated computations are merged, zero Pads before convolutions and pools folded into
  // their padding, concatenations read by convolutions alone split into them, and grouped
  // 1-D convolutions written over a height of 1 (conv1d_as_2d.h) first;
  // `algorithms` (by the caller's node index) follows its convs by name.
  RegionCompiler(const Graph& region, const std::vector<ConvAlgorithm>& algorithms)
      : region_(lift_1d_convs_to_2d(split_concats_into_convs(fold_pads(merge_duplicates(region))))),
        algorithms_(by_name(region, algorithms, region_)),
        consumers_(region_.consumers()),
        covered_(region_.num_nodes(), false),
        emitted_(region_.num_nodes(), false),
        values_(program_) {}

  std::unique_ptr<Kernel> compile() {
    for (size_t n = 0; n < region_.num_nodes(); ++n) {
      const Node& node = region_.node(static_cast<NodeId>(n));
      if (!region_node(region_, node))
        fail(ErrorKind::kUnsupported, "onednn-graph: can't take node '{}' ({})", node.name,
             node.op_type);
    }
    values_.bind_plain_boundary(region_);
    place_concatenations();
    available_.insert(region_.inputs.begin(), region_.inputs.end());
    for (size_t n = 0; n < region_.num_nodes(); ++n)
      if (!covered_[n]) pending_.push_back(grow(static_cast<NodeId>(n)));
    // Groups in dependency order: a tail may read a value a later head produces.
    while (!pending_.empty()) {
      auto ready = std::find_if(pending_.begin(), pending_.end(), [&](const Group& g) {
        return inputs_ready(g.nodes(g.steps.size()));
      });
      if (ready == pending_.end())
        fail(ErrorKind::kUnsupported, "onednn-graph: no group of the region is ready");
      Group group = *ready;
      pending_.erase(ready);
      emit(group);
    }
    std::unique_ptr<LaneMemo> memo = region_lane_memo(region_, algorithms_, omp_get_max_threads());
    return std::make_unique<ProgramKernel>(std::move(program_), Program::Lanes::kMeasured,
                                           memo.get());
  }

 private:
  // `head` and the longest tail onednn fuses after it: each step's input read by that step
  // alone and not a region output, so it never needs to exist in memory.
  Group grow(NodeId head) {
    Group group;
    group.head = head;
    covered_[head] = true;
    const Node& node = region_.node(head);
    // The nodes of a unit `head` belongs to, when no other group took one yet: the group's one
    // step besides the head.
    auto take_whole = [&](const std::optional<std::vector<NodeId>>& unit) {
      if (!unit || std::any_of(unit->begin(), unit->end(),
                               [&](NodeId n) { return n != head && covered_[n]; }))
        return false;
      std::vector<NodeId> rest;
      for (NodeId n : *unit)
        if (n != head) rest.push_back(n);
      for (NodeId n : rest) covered_[n] = true;
      group.steps.push_back(rest);
      return true;
    };
    // An exported GroupNorm its first Reshape heads is one group (one step, group_norm.h).
    if (std::optional<GroupNorm> gn = match_group_norm(region_, consumers_, head);
        gn && take_whole(gn->nodes))
      return group;
    if (node.op_type == "Reshape") {
      // A channel shuffle is one group (one primitive); a lone Reshape is a view.
      if (std::optional<std::vector<NodeId>> rest = channel_shuffle(region_, consumers_, head);
          rest && std::none_of(rest->begin(), rest->end(), [&](NodeId n) { return covered_[n]; })) {
        for (NodeId n : *rest) covered_[n] = true;
        group.steps.push_back(*rest);
      }
      return group;
    }
    // A squeeze-excitation block its mean heads is one group (one step, squeeze_excite.h).
    if (std::optional<SqueezeExcite> se = match_squeeze_excite(region_, consumers_, head);
        se && take_whole(se->nodes))
      return group;
    // A normalization's nodes that nothing took yet (the head aside) are one group: the
    // exported LayerNorm decomposition its first ReduceMean heads (one primitive), the
    // exported RMSNorm its Pow heads (one step of collage's code).
    if (node.op_type == "ReduceMean" && take_whole(layer_norm_nodes(region_, consumers_, head)))
      return group;
    if (node.op_type == "Pow" && take_whole(rms_norm_nodes(region_, consumers_, head)))
      return group;
    // A Where of a computed condition and the nodes computing it are one group (one step,
    // masked_select.h); a member whose unit another group holds in part fails to emit.
    if (std::optional<std::vector<NodeId>> unit = masked_unit_holding(region_, consumers_, head)) {
      take_whole(unit);
      return group;
    }
    if (is_view_op(node) || layout_head(region_, node) || node.op_type == "Where" ||
        unary_math_takes(region_, node) || expand_takes(region_, node) ||
        index_copy_takes(region_, node) || grid_sample_takes(region_, node) ||
        recurrent_takes(region_, node))
      return group;
    // Layer normalization and softmax take no post-ops (oneDNN 2.6).
    if (const Family* f = family_of(node.op_type); f && f->name == "norm") return group;
    ValueId cur = node.outputs[0];
    // An exported GELU or SiLU starting at this node (its input made by no head that took it
    // as a tail) is the group's first step, as emit_elementwise runs it.
    for (ValueId in : node.inputs) {
      if (in == kNoValue || region_.value(in).is_constant()) continue;
      std::optional<TailStep> fused = match_fused_activation(region_, consumers_, in, false);
      if (!fused || fused->nodes.front() != head ||
          std::any_of(fused->nodes.begin() + 1, fused->nodes.end(),
                      [&](NodeId n) { return covered_[n]; }))
        continue;
      const std::vector<NodeId> rest(fused->nodes.begin() + 1, fused->nodes.end());
      for (NodeId n : rest) covered_[n] = true;
      group.steps.push_back(rest);
      cur = fused->out;
      break;
    }
    bool depthwise = false;
    for (int k = 0; k < kMaxTail; ++k) {
      std::optional<TailStep> step = next_tail_step(region_, consumers_, cur);
      if (!step && !depthwise) {
        // A 1x1 conv's tail may end in the depthwise conv it runs as a post-op (append_dw),
        // where oneDNN builds the pair as its one-pass kernel (2.3x faster than the two
        // primitives on 16 -> 192 at 112x112); its two-primitive form is refused and the
        // group splits (DepthwisePairForm::kOnePass, docs/DESIGN.md).
        const NodeId dw = depthwise_post_op(region_, consumers_, head, cur);
        if (dw >= 0) step = TailStep{{dw}, region_.node(dw).outputs[0], {}};
        depthwise = dw >= 0;
      }
      if (!step || std::any_of(step->nodes.begin(), step->nodes.end(),
                               [&](NodeId n) { return covered_[n]; }))
        break;
      for (NodeId n : step->nodes) covered_[n] = true;
      group.steps.push_back(step->nodes);
      cur = step->out;
    }
    return group;
  }

  // Each root buffer of the concatenations done in place (concat_in_place.h), in the
  // channel-blocked layout of its rank, and every value placed in it given its slice.
  void place_concatenations() {
    const ConcatPlan plan = plan_concats_in_place(region_);
    if (plan.roots.empty()) return;
    std::vector<dnnl::memory> roots;
    for (ValueId r : plan.roots) roots.push_back(program_.rewritten_buffer(blocked_md(r)));
    for (const auto& [v, home] : plan.homes) {
      const Shape& shape = region_.value(v).shape;
      // A batch-1 block of whole channel blocks is contiguous: it starts `offset` channels
      // of the root's spatial size in.
      const int64_t spatial =
          std::accumulate(shape.begin() + 2, shape.end(), int64_t{1}, std::multiplies<>());
      char* base = static_cast<char*>(roots[home.root].get_data_handle());
      values_.place(v, dnnl::memory(blocked_md(v), cpu_engine(),
                                    base + home.offset * spatial * sizeof(float)));
    }
    values_.keep_input_layouts(true);
  }

  dnnl::memory::desc blocked_md(ValueId v) const {
    return channel_blocked_md(to_dims(region_.value(v).shape));
  }

  // Every reader of `v` is in `nodes` or already emitted, and `v` does not leave the region.
  bool read_last_by(ValueId v, const std::vector<NodeId>& nodes) const {
    if (std::find(region_.outputs.begin(), region_.outputs.end(), v) != region_.outputs.end())
      return false;
    for (NodeId r : consumers_[v])
      if (!emitted_[r] && !std::binary_search(nodes.begin(), nodes.end(), r)) return false;
    return true;
  }

  bool inputs_ready(const std::vector<NodeId>& nodes) const {
    for (ValueId v : boundary_of(region_, nodes).inputs)
      if (!available_.count(v)) return false;
    return true;
  }

  // Emits `group` with as long a tail as oneDNN takes (its post-op limits show only when
  // the primitive is created); the steps left over become groups of their own.
  void emit(const Group& group) {
    for (size_t k = group.steps.size() + 1; k-- > 0;) {
      const Program::Mark mark = program_.mark();
      try {
        emit_nodes(group.nodes(k));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUnsupported || k == 0) throw;
        program_.rollback(mark);
        continue;
      }
      for (size_t s = k; s < group.steps.size(); ++s)
        for (NodeId n : group.steps[s]) covered_[n] = false;
      for (size_t s = k; s < group.steps.size(); ++s)
        for (NodeId n : group.steps[s])
          if (!covered_[n]) pending_.push_back(grow(n));
      return;
    }
  }

  void emit_nodes(const std::vector<NodeId>& nodes) {
    const Boundary b = boundary_of(region_, nodes);
    const Graph sub = extract_subgraph(region_, nodes);
    // The group sees region values under its own subgraph's ids.
    ValueMemories group_values(program_);
    group_values.keep_input_layouts(values_.keeps_input_layouts());
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      ValueMemories::Entry e = values_.entry(b.inputs[i]);
      e.last_read = read_last_by(b.inputs[i], nodes);
      group_values.set(sub.inputs[i], std::move(e));
    }
    for (size_t i = 0; i < b.outputs.size(); ++i)
      if (values_.has(b.outputs[i])) group_values.set(sub.outputs[i], values_.entry(b.outputs[i]));
    const NodeId head = *std::min_element(nodes.begin(), nodes.end());
    emit_group(
        sub, group_values,
        static_cast<size_t>(head) < algorithms_.size() ? algorithms_[head] : ConvAlgorithm::kDirect,
        DepthwisePairForm::kOnePass);
    // Inputs come back too: a reorder one group made is reused by the next reader.
    for (size_t i = 0; i < b.inputs.size(); ++i)
      values_.set(b.inputs[i], group_values.entry(sub.inputs[i]));
    for (size_t i = 0; i < b.outputs.size(); ++i) {
      values_.set(b.outputs[i], group_values.entry(sub.outputs[i]));
      available_.insert(b.outputs[i]);
    }
    for (NodeId n : nodes) emitted_[n] = true;
  }

  const Graph region_;
  const std::vector<ConvAlgorithm> algorithms_;
  const Consumers consumers_;
  std::vector<bool> covered_;
  std::vector<bool> emitted_;
  Program program_;
  ValueMemories values_;
  std::set<ValueId> available_;
  std::deque<Group> pending_;
};

}  // namespace

namespace {

// The attributes of `n` as text, equal exactly when the attributes are; nullopt for tensor
// attributes (not compared).
std::optional<std::string> attributes_key(const Node& n) {
  std::string key;
  for (const auto& [name, a] : n.attrs) {
    if (a.type == Attribute::Type::kTensor) return std::nullopt;
    key += fmt::format("{}:{}:{}:{}:{}:{}:{}:{};", name, static_cast<int>(a.type), a.i, a.f, a.s,
                       fmt::join(a.ints, ","), fmt::join(a.floats, ","), fmt::join(a.strings, ","));
  }
  return key;
}

}  // namespace

Graph merge_duplicates(const Graph& region) {
  Graph g = region;
  std::vector<ValueId> same(g.num_values());
  for (size_t v = 0; v < same.size(); ++v) same[v] = static_cast<ValueId>(v);
  std::map<std::tuple<std::string, std::string, std::vector<ValueId>, std::string>, NodeId> seen;
  std::vector<bool> merged(g.num_nodes(), false);
  bool any = false;
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    Node& n = g.node(static_cast<NodeId>(i));
    for (ValueId& v : n.inputs)
      if (v != kNoValue) v = same[v];
    const std::optional<std::string> attrs = attributes_key(n);
    if (!attrs) continue;
    auto [it, fresh] = seen.emplace(std::make_tuple(n.domain, n.op_type, n.inputs, *attrs),
                                    static_cast<NodeId>(i));
    if (fresh) continue;
    // A value the region hands out stays its own: each output is bound once.
    const Node& first = g.node(it->second);
    const bool leaves = std::any_of(n.outputs.begin(), n.outputs.end(), [&](ValueId v) {
      return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
    });
    bool covered = first.outputs.size() == n.outputs.size();
    for (size_t k = 0; covered && k < n.outputs.size(); ++k)
      covered = n.outputs[k] == kNoValue || first.outputs[k] != kNoValue;
    if (leaves || !covered) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != kNoValue) same[n.outputs[k]] = first.outputs[k];
    merged[i] = true;
    any = true;
  }
  if (any) g.prune(merged);
  return g;
}

bool region_node(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty()) return false;
  const std::string& t = n.op_type;
  if (is_view_op(n)) {
    // Reshape's shape and opset-13 Squeeze/Unsqueeze's axes are constants, not inputs.
    const ValueId second = n.input(1);
    const bool constant_second = second != kNoValue && g.value(second).is_constant();
    return n.outputs.size() == 1 && is_f32(g, n.input(0)) && g.value(n.outputs[0]).shape_known &&
           (t == "Reshape" ? constant_second : second == kNoValue || constant_second);
  }
  if (layout_head(g, n)) return true;
  if (t == "BatchNormalization") {
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (n.outputs[i] != kNoValue) return false;
    for (size_t i = 1; i < 5; ++i)
      if (n.input(i) == kNoValue || !g.value(n.input(i)).is_constant()) return false;
    return is_f32(g, n.input(0)) && n.attr_int("training_mode", 0) == 0;
  }
  if (t == "InstanceNormalization") return instance_norm_takes(g, n);
  if (t == "LRN") return lrn_takes(g, n);
  if (t == "PRelu" && prelu_takes(g, n)) return true;
  // A normalization over the last axis (the op, or the decomposition an opset-13 export
  // writes: its ReduceMean head here, its elementwise nodes below) and the erf of an
  // exported GELU: ConvNeXt's and Swin's blocks cut a region at each otherwise.
  if (t == "LayerNormalization" || t == "Softmax" || t == "LogSoftmax")
    return is_f32(g, n.input(0)) && g.value(n.input(0)).shape_known;
  if (t == "ReduceMean" && in_layer_norm(g, g.consumers(), g.value(n.outputs[0]).producer))
    return true;
  if (unary_math_takes(g, n)) return true;  // a lone Erf too (unary_math.h)
  if (t == "Expand") return expand_takes(g, n);
  if (index_copy_takes(g, n)) return true;  // a flip, a Gather of an index list
  if (t == "GridSample") return grid_sample_takes(g, n);
  if (t == "RNN" || t == "GRU" || t == "LSTM") return recurrent_takes(g, n);
  if (t == "Erf") return gelu_around_erf(g, g.consumers(), n).has_value();
  if (std::find(masked_select_ops().begin(), masked_select_ops().end(), t) !=
      masked_select_ops().end())
    return masked_select_kind(g, n) &&
           masked_unit_holding(g, g.consumers(), g.value(n.outputs[0]).producer).has_value();
  if (t == "Conv" || t == "ConvTranspose") {
    const size_t rank = g.value(n.input(0)).shape.size();
    if (rank < 3 || rank > 5) return false;
  }
  return primitive_head(g, n) || elementwise_head(g, n);
}

std::unique_ptr<Kernel> compile_region(const Graph& region,
                                       const std::vector<ConvAlgorithm>& algorithms) {
  if (region.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn-graph: empty region");
  try {
    return RegionCompiler(region, algorithms).compile();
  } catch (const dnnl::error& e) {
    fail(ErrorKind::kUnsupported, "onednn-graph: {}", e.what());
  }
}

}  // namespace collage::onednn
