// A placement and its schedule: which nodes run together on which backend (built how, with
// how many threads), and which groups run at the same time. Written by `collage tune` as
// JSON, reusable by `collage run --plan` and the C++ Session.
//
// Format version 2 (version 1, without variant/threads/stage/lane, still loads: its groups
// run one after another with the plan's thread count). Groups are listed in execution
// order. Groups of one `stage` run at the same time, one `lane` per worker: the groups of a
// lane run in their listed order, each lane on `threads` threads of its own. Stages run one
// after another. Every group in stage 0, lane 0 is the sequential schedule.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage {

struct PlanGroup {
  std::vector<std::string> nodes;  // node names, in execution order
  std::string backend;
  std::string variant;  // the backend's way of building it ("" = its default)
  int threads = 0;      // threads the kernel runs with (0 = the plan's count)
  int stage = 0;
  int lane = 0;
  double cost_ms = 0;  // measured alone (0 when unknown)
};

struct Plan {
  static constexpr int kFormatVersion = 2;

  std::string model_hash;  // model_hash() of the graph it was made for
  std::string hardware;    // fingerprint of the machine it was tuned on
  int threads = 0;         // the thread budget it was tuned for (every lane's share together)
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
  // Throws Error(kIo) where save(path) would fail for the place itself (a missing or
  // read-only directory, a directory or read-only file at the path), without writing: so a
  // tune can refuse its output path before it spends minutes tuning.
  static void check_writable(const std::string& path);
};

// A digest of the imported graph (ops, attributes, shapes, constants' shapes and node
// names): a plan is only valid for the graph it names.
std::string model_hash(const Graph& graph);
// Whether `plan` was made for `graph`: its model_hash is the graph's (or what collage
// computed for it before the digest fix of cost-DB schema 3, so older plans still load).
bool plan_is_for(const Plan& plan, const Graph& graph);

}  // namespace collage
