#include "runtime/candidate.h"

#include <fmt/format.h>

#include <algorithm>

namespace collage {

std::string Candidate::label() const {
  std::string name = backend ? backend->name() : "-";
  if (!variant.empty()) name += "/" + variant_summary(variant);
  return fmt::format("{} x{}", name, threads);
}

std::vector<const Device*> devices_of(const Placement& placement) {
  std::vector<const Device*> out;
  for (const Candidate& c : placement) {
    const Device* d = c.backend ? c.backend->device() : nullptr;
    if (d && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

}  // namespace collage
