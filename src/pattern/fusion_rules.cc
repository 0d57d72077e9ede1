#include <algorithm>
#include <set>

#include "collage/pattern.h"

namespace collage {
namespace {

bool kind_in(const Node& node, const std::set<OpKind>& kinds) {
  const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
  return def && kinds.count(def->kind) > 0;
}

}  // namespace

FusionRule fuse_tail(std::string name, std::set<std::string> head_ops, std::set<OpKind> tail,
                     int max_tail, std::function<bool(const Graph&, const Node&)> accept_node) {
  FusionRule rule;
  rule.name = name;
  rule.description =
      fmt::format("one of {} followed by up to {} ops of kinds", head_ops.size(), max_tail);
  for (OpKind k : tail) rule.description += std::string(" ") + op_kind_name(k);
  rule.generate = [=](const Graph& g) {
    std::vector<Match> out;
    auto consumers = g.consumers();
    for (size_t h = 0; h < g.num_nodes(); ++h) {
      const Node& head = g.node(static_cast<NodeId>(h));
      if (!head_ops.count(head.op_type) || !accept_node(g, head)) continue;
      std::vector<NodeId> chain = {static_cast<NodeId>(h)};
      ValueId cur = head.outputs.empty() ? kNoValue : head.outputs[0];
      for (int depth = 0; depth < max_tail && cur != kNoValue; ++depth) {
        // The chain continues only through a value with a single reader, so the group has
        // one output and the head's result need not be materialised.
        if (consumers[cur].size() != 1) break;
        const Node& next = g.node(consumers[cur][0]);
        if (!kind_in(next, tail) || !accept_node(g, next)) break;
        chain.push_back(consumers[cur][0]);
        out.push_back(Match{chain});
        std::sort(out.back().nodes.begin(), out.back().nodes.end());
        cur = next.outputs.empty() ? kNoValue : next.outputs[0];
      }
    }
    return out;
  };
  return rule;
}

FusionRule fuse_region(std::string name, std::set<OpKind> kinds, int max_nodes,
                       std::function<bool(const Graph&, const Node&)> accept_node) {
  FusionRule rule;
  rule.name = name;
  rule.description = fmt::format("connected regions of up to {} ops of kinds", max_nodes);
  for (OpKind k : kinds) rule.description += std::string(" ") + op_kind_name(k);
  rule.generate = [=](const Graph& g) {
    std::vector<Match> out;
    std::set<std::vector<NodeId>> seen;
    auto consumers = g.consumers();
    auto ok = [&](NodeId n) { return kind_in(g.node(n), kinds) && accept_node(g, g.node(n)); };
    // Grow from each eligible node through eligible neighbours (producers and consumers),
    // always taking the smallest-numbered one so growth is deterministic, and record every
    // convex region on the way.
    for (size_t s = 0; s < g.num_nodes(); ++s) {
      if (!ok(static_cast<NodeId>(s))) continue;
      std::set<NodeId> region = {static_cast<NodeId>(s)};
      while (static_cast<int>(region.size()) < max_nodes) {
        NodeId next = -1;
        auto consider = [&](NodeId u) {
          if (u >= 0 && !region.count(u) && ok(u) && (next < 0 || u < next)) next = u;
        };
        for (NodeId r : region) {
          for (ValueId v : g.node(r).outputs)
            if (v != kNoValue)
              for (NodeId u : consumers[v]) consider(u);
          for (ValueId v : g.node(r).inputs)
            if (v != kNoValue) consider(g.value(v).producer);
        }
        if (next < 0) break;
        region.insert(next);
        std::vector<NodeId> sorted(region.begin(), region.end());
        if (is_convex(g, sorted) && seen.insert(sorted).second) out.push_back(Match{sorted});
      }
    }
    return out;
  };
  return rule;
}

}  // namespace collage
