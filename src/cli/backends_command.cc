// collage backends: every registered backend, its version, kind, thread model and patterns.
#include <fmt/core.h>

#include "cli/commands.h"
#include "collage/backend.h"

namespace collage::cli {
namespace {

int list_backends(bool verbose) {
  for (Backend* b : BackendRegistry::global().all()) {
    fmt::print("{} {} ({}, threads: {}){}\n", b->name(), b->version(), backend_kind_name(b->kind()),
               b->thread_model(),
               b->available() ? "" : " [not available: " + b->unavailable_reason() + "]");
    if (Device* device = b->device(); device && b->available())
      fmt::print("  device: {}\n", device->description());
    for (const std::string& line : b->details()) fmt::print("  {}\n", line);
    std::vector<PatternEntry> patterns = b->patterns();
    std::vector<FusionRule> rules = b->fusion_rules();
    fmt::print("  patterns: {}, fusion rules: {}\n", patterns.size(), rules.size());
    for (const PatternEntry& p : patterns)
      fmt::print("    {:<28} {}\n", p.name, p.pattern.to_string());
    for (const FusionRule& r : rules) fmt::print("    {:<28} rule: {}\n", r.name, r.description);
  }
  return 0;
}

}  // namespace

Action add_backends_command(CLI::App& app) {
  auto verbose = std::make_shared<bool>(false);
  app.add_subcommand("backends", "list backends, their versions and the patterns they claim");
  return [verbose] { return list_backends(*verbose); };
}

}  // namespace collage::cli
