#include "runtime/candidate.h"

#include <fmt/format.h>

namespace collage {

std::string Candidate::label() const {
  std::string name = backend ? backend->name() : "-";
  if (!variant.empty()) name += "/" + variant_summary(variant);
  return fmt::format("{} x{}", name, threads);
}

}  // namespace collage
