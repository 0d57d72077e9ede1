#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "collage/backend.h"

namespace collage {
namespace {

// The backend that runs what no other takes (src/backends/reference): named here only.
constexpr const char* kFallbackBackend = "reference";

// Built-in backends register here during static initialisation; global() adopts them.
std::vector<std::function<std::shared_ptr<Backend>()>>& pending_builtins() {
  static std::vector<std::function<std::shared_ptr<Backend>()>> list;
  return list;
}

}  // namespace

const char* backend_kind_name(BackendKind kind) {
  return kind == BackendKind::kOpLevel ? "op-level" : "graph-level";
}

detail::BackendRegistrar::BackendRegistrar(std::function<std::shared_ptr<Backend>()> make) {
  pending_builtins().push_back(std::move(make));
}

BackendRegistry& BackendRegistry::global() {
  static BackendRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& make : pending_builtins()) registry.add(make());
    // Stable order for listings: the fallback first, then by name.
    std::stable_sort(registry.backends_.begin(), registry.backends_.end(),
                     [](const auto& a, const auto& b) {
                       if ((a->name() == kFallbackBackend) != (b->name() == kFallbackBackend))
                         return a->name() == kFallbackBackend;
                       return a->name() < b->name();
                     });
  });
  return registry;
}

void BackendRegistry::add(std::shared_ptr<Backend> backend) {
  for (auto& existing : backends_)
    if (existing->name() == backend->name()) {
      existing = std::move(backend);
      return;
    }
  backends_.push_back(std::move(backend));
}

Backend* BackendRegistry::find(const std::string& name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b.get();
  return nullptr;
}

Backend& BackendRegistry::get(const std::string& name) const {
  if (Backend* b = find(name)) return *b;
  std::string names;
  for (const auto& b : backends_) names += (names.empty() ? "" : ", ") + b->name();
  fail(ErrorKind::kInvalidArgument, "unknown backend '{}' (available: {})", name, names);
}

Backend& BackendRegistry::fallback() const {
  Backend* b = find(kFallbackBackend);
  if (!b)
    fail(ErrorKind::kInternal, "the fallback backend '{}' is not registered", kFallbackBackend);
  return *b;
}

std::vector<Backend*> BackendRegistry::all() const {
  std::vector<Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

void BackendRegistry::load_plugin(const std::string& path) {
  // RTLD_NODELETE: kernels from the plugin may outlive any handle we keep.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) fail(ErrorKind::kIo, "cannot load backend plugin '{}': {}", path, dlerror());
  auto fn = reinterpret_cast<CollageRegisterBackendsFn>(dlsym(handle, "collage_register_backends"));
  if (!fn)
    fail(ErrorKind::kIo, "backend plugin '{}' does not export collage_register_backends", path);
  fn(this);
}

std::vector<Match> find_matches(const Graph& graph, const Backend& backend) {
  std::set<std::vector<NodeId>> seen;
  std::vector<Match> out;
  auto consider = [&](Match m, const PatternEntry* entry) {
    if (m.nodes.empty() || seen.count(m.nodes)) return;
    if (entry && entry->check && !entry->check(graph, m)) return;
    if (!is_convex(graph, m.nodes)) return;
    seen.insert(m.nodes);
    out.push_back(std::move(m));
  };
  std::vector<PatternEntry> entries = backend.patterns();
  for (size_t n = 0; n < graph.num_nodes(); ++n) {
    for (ValueId root : graph.node(static_cast<NodeId>(n)).outputs) {
      if (root == kNoValue) continue;
      for (const PatternEntry& entry : entries)
        for (auto& nodes : entry.pattern.match(graph, root)) consider(Match{nodes}, &entry);
    }
  }
  for (const FusionRule& rule : backend.fusion_rules())
    for (Match& m : rule.generate(graph)) consider(std::move(m), nullptr);
  return out;
}

}  // namespace collage
