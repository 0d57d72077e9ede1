#include "collage/plan.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collage/error.h"
#include "ir/canonical.h"

namespace collage {

using nlohmann::json;

namespace {

std::string model_text(const Graph& graph) {
  std::string names;
  for (const Node& n : graph.nodes()) names += n.name + "\n";
  return canonical_text(graph) + names;
}

}  // namespace

std::string model_hash(const Graph& graph) {
  return digest(model_text(graph));
}

bool plan_is_for(const Plan& plan, const Graph& graph) {
  // Plans written before the digest was fixed (cost-DB schema 3) hold the old digest.
  const std::string text = model_text(graph);
  return plan.model_hash == digest(text) || plan.model_hash == digest_before_schema_3(text);
}

std::string Plan::to_json() const {
  json j;
  j["format"] = "collage-plan";
  j["version"] = kFormatVersion;
  j["model_hash"] = model_hash;
  j["hardware"] = hardware;
  j["threads"] = threads;
  j["backend_versions"] = backend_versions;
  j["optimizer"] = optimizer;
  j["predicted_ms"] = predicted_ms;
  j["measured_ms"] = measured_ms;
  json groups = json::array();
  for (const PlanGroup& g : this->groups)
    groups.push_back({{"backend", g.backend},
                      {"variant", g.variant},
                      {"threads", g.threads},
                      {"stage", g.stage},
                      {"lane", g.lane},
                      {"cost_ms", g.cost_ms},
                      {"nodes", g.nodes}});
  j["groups"] = groups;
  return j.dump(2);
}

Plan Plan::from_json(const std::string& text) {
  Plan plan;
  try {
    json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != "collage-plan")
      fail(ErrorKind::kParse, "not a collage plan (missing \"format\": \"collage-plan\")");
    const int version = j.value("version", 0);
    if (version < 1 || version > kFormatVersion)
      fail(ErrorKind::kUnsupported,
           "plan format version {} is not supported (this collage reads 1 to {})", version,
           kFormatVersion);
    plan.model_hash = j.at("model_hash").get<std::string>();
    plan.hardware = j.value("hardware", "");
    plan.threads = j.value("threads", 0);
    plan.backend_versions = j.value("backend_versions", std::map<std::string, std::string>{});
    plan.optimizer = j.value("optimizer", "");
    plan.predicted_ms = j.value("predicted_ms", 0.0);
    plan.measured_ms = j.value("measured_ms", 0.0);
    for (const json& g : j.at("groups")) {
      PlanGroup group;
      group.backend = g.at("backend").get<std::string>();
      group.cost_ms = g.value("cost_ms", 0.0);
      group.nodes = g.at("nodes").get<std::vector<std::string>>();
      if (group.nodes.empty()) fail(ErrorKind::kParse, "a plan group has no nodes");
      // Version 1 has none of these: sequential, the plan's thread count, default variants.
      group.variant = g.value("variant", "");
      group.threads = g.value("threads", 0);
      group.stage = g.value("stage", 0);
      group.lane = g.value("lane", 0);
      if (group.threads < 0 || group.stage < 0 || group.lane < 0)
        fail(ErrorKind::kParse, "a plan group has a negative threads, stage or lane");
      plan.groups.push_back(std::move(group));
    }
  } catch (const json::exception& e) {
    fail(ErrorKind::kParse, "malformed plan: {}", e.what());
  }
  return plan;
}

void Plan::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) fail(ErrorKind::kIo, "cannot write plan to '{}'", path);
  out << to_json() << "\n";
  if (!out) fail(ErrorKind::kIo, "cannot write plan to '{}'", path);
}

void Plan::check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(ErrorKind::kIo, "cannot write plan to '{}': no directory '{}'", path, dir.string());
  if (fs::is_directory(target, ec))
    fail(ErrorKind::kIo, "cannot write plan to '{}': it is a directory", path);
  const bool exists = fs::exists(target, ec);
  if (access(exists ? path.c_str() : dir.c_str(), W_OK) != 0)
    fail(ErrorKind::kIo, "cannot write plan to '{}': {}", path, std::strerror(errno));
}

Plan Plan::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kIo, "cannot read plan '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str());
}

}  // namespace collage
