#include "search/candidates.h"

#include <algorithm>

namespace collage {

std::vector<Backend*> select_backends(const std::vector<std::string>& names) {
  BackendRegistry& registry = BackendRegistry::global();
  std::vector<Backend*> out = {&registry.fallback()};
  if (names.empty()) {
    for (Backend* b : registry.all())
      if (!registry.is_fallback(*b) && b->available()) out.push_back(b);
    return out;
  }
  for (const std::string& name : names) {
    Backend& b = registry.get(name);
    if (!b.available())
      fail(ErrorKind::kInvalidArgument, "backend '{}' is not available on this machine: {}", name,
           b.unavailable_reason());
    if (std::find(out.begin(), out.end(), &b) == out.end()) out.push_back(&b);
  }
  return out;
}

std::vector<Candidate> enumerate_candidates(const Graph& graph,
                                            const std::vector<Backend*>& backends, int threads) {
  std::vector<Candidate> out;
  for (Backend* b : backends)
    for (Match& m : find_matches(graph, *b)) {
      std::vector<std::string> variants = b->variants(extract_subgraph(graph, m.nodes));
      for (std::string& variant : variants)
        out.push_back(Candidate{m.nodes, b, std::move(variant), threads});
    }
  return out;
}

}  // namespace collage
