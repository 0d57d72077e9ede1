// A placement: which nodes run together on which backend. Written by `collage tune` as
// JSON, reusable by `collage run --plan` and the C++ Session.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage {

struct PlanGroup {
  std::vector<std::string> nodes;  // node names, in execution order
  std::string backend;
  double cost_ms = 0;  // measured alone (0 when unknown)
};

struct Plan {
  std::string model_hash;  // model_hash() of the graph it was made for
  std::string hardware;    // fingerprint of the machine it was tuned on
  int threads = 0;
  std::map<std::string, std::string> backend_versions;
  std::string optimizer;          // "op-level", "two-level", or "single:<backend>"
  std::vector<PlanGroup> groups;  // every node in exactly one group, in execution order
  double predicted_ms = 0;        // sum of group costs + step overheads
  double measured_ms = 0;         // end to end, when tuning measured it

  std::string to_json() const;
  // Throws Error(kParse) for malformed JSON / missing fields.
  static Plan from_json(const std::string& text);
  void save(const std::string& path) const;
  static Plan load(const std::string& path);
};

// A digest of the imported graph (ops, attributes, shapes, constants' shapes and node
// names): a plan is only valid for the graph it names.
std::string model_hash(const Graph& graph);

}  // namespace collage
