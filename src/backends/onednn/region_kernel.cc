#include "backends/onednn/region_kernel.h"

#include <algorithm>
#include <deque>
#include <set>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

bool is_f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

bool is_view_op(const Node& n) {
  return n.domain.empty() && (n.op_type == "Flatten" || n.op_type == "Reshape");
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
  RegionCompiler(const Graph& region, const std::vector<bool>& winograd)
      : region_(region),
        winograd_(winograd),
        consumers_(region.consumers()),
        covered_(region.num_nodes(), false),
        emitted_(region.num_nodes(), false),
        values_(program_) {}

  std::unique_ptr<Kernel> compile() {
    for (size_t n = 0; n < region_.num_nodes(); ++n) {
      const Node& node = region_.node(static_cast<NodeId>(n));
      if (!region_node(region_, node))
        fail(ErrorKind::kUnsupported, "onednn-graph: can't take node '{}' ({})", node.name,
             node.op_type);
    }
    values_.bind_plain_boundary(region_);
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
    return std::make_unique<ProgramKernel>(std::move(program_));
  }

 private:
  // `head` and the longest tail onednn fuses after it: each step's input read by that step
  // alone and not a region output, so it never needs to exist in memory.
  Group grow(NodeId head) {
    Group group;
    group.head = head;
    covered_[head] = true;
    const Node& node = region_.node(head);
    if (is_view_op(node)) return group;
    ValueId cur = node.outputs[0];
    bool depthwise = false;
    for (int k = 0; k < kMaxTail; ++k) {
      std::optional<TailStep> step = next_tail_step(region_, consumers_, cur);
      if (!step && !depthwise) {
        // A 1x1 conv's tail may end in the depthwise conv it runs as a post-op (append_dw):
        // measured never slower than the two primitives in one program, and up to 2.3x
        // faster where oneDNN's fused form avoids a layout change (docs/DESIGN.md).
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
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      ValueMemories::Entry e = values_.entry(b.inputs[i]);
      e.last_read = read_last_by(b.inputs[i], nodes);
      group_values.set(sub.inputs[i], std::move(e));
    }
    for (size_t i = 0; i < b.outputs.size(); ++i)
      if (values_.has(b.outputs[i])) group_values.set(sub.outputs[i], values_.entry(b.outputs[i]));
    const NodeId head = *std::min_element(nodes.begin(), nodes.end());
    const bool winograd = static_cast<size_t>(head) < winograd_.size() && winograd_[head];
    emit_group(sub, group_values, winograd ? ConvAlgorithm::kWinograd : ConvAlgorithm::kDirect);
    // Inputs come back too: a reorder one group made is reused by the next reader.
    for (size_t i = 0; i < b.inputs.size(); ++i)
      values_.set(b.inputs[i], group_values.entry(sub.inputs[i]));
    for (size_t i = 0; i < b.outputs.size(); ++i) {
      values_.set(b.outputs[i], group_values.entry(sub.outputs[i]));
      available_.insert(b.outputs[i]);
    }
    for (NodeId n : nodes) emitted_[n] = true;
  }

  const Graph& region_;
  const std::vector<bool> winograd_;
  const Consumers consumers_;
  std::vector<bool> covered_;
  std::vector<bool> emitted_;
  Program program_;
  ValueMemories values_;
  std::set<ValueId> available_;
  std::deque<Group> pending_;
};

}  // namespace

bool region_node(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty()) return false;
  const std::string& t = n.op_type;
  if (t == "Flatten" || t == "Reshape")
    return n.outputs.size() == 1 && is_f32(g, n.input(0)) && g.value(n.outputs[0]).shape_known &&
           (t == "Flatten" || (n.input(1) != kNoValue && g.value(n.input(1)).is_constant()));
  if (t == "BatchNormalization") {
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (n.outputs[i] != kNoValue) return false;
    for (size_t i = 1; i < 5; ++i)
      if (n.input(i) == kNoValue || !g.value(n.input(i)).is_constant()) return false;
    return is_f32(g, n.input(0)) && n.attr_int("training_mode", 0) == 0;
  }
  if (t == "Conv" || t == "ConvTranspose") {
    const size_t rank = g.value(n.input(0)).shape.size();
    if (rank < 3 || rank > 5) return false;
  }
  return primitive_head(g, n) || elementwise_head(g, n);
}

std::unique_ptr<Kernel> compile_region(const Graph& region, const std::vector<bool>& winograd) {
  if (region.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn-graph: empty region");
  try {
    return RegionCompiler(region, winograd).compile();
  } catch (const dnnl::error& e) {
    fail(ErrorKind::kUnsupported, "onednn-graph: {}", e.what());
  }
}

}  // namespace collage::onednn
