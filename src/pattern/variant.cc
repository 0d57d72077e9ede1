// Composed variants (see collage/backend.h): how the graph-level search tells a graph-level
// backend which of a region's nodes it assembled from groups built as which variant.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "collage/backend.h"
#include "collage/error.h"

namespace collage {

std::string compose_variant(std::vector<VariantPart> parts) {
  std::map<std::string, std::vector<int>> by_name;
  for (VariantPart& p : parts) {
    if (p.variant.empty() || p.nodes.empty()) continue;
    std::vector<int>& nodes = by_name[p.variant];
    nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
  }
  std::string out;
  for (auto& [name, nodes] : by_name) {
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    if (!out.empty()) out += ';';
    out += fmt::format("{}@{}", name, fmt::join(nodes, ","));
  }
  return out;
}

std::optional<std::vector<VariantPart>> parse_composed_variant(const std::string& variant,
                                                               size_t num_nodes) {
  if (variant.empty()) return std::vector<VariantPart>{};
  if (variant.find('@') == std::string::npos) return std::nullopt;
  std::vector<VariantPart> parts;
  size_t start = 0;
  while (start <= variant.size()) {
    size_t end = variant.find(';', start);
    if (end == std::string::npos) end = variant.size();
    const std::string part = variant.substr(start, end - start);
    const size_t at = part.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == part.size())
      fail(ErrorKind::kUnsupported, "malformed composed variant '{}'", variant);
    VariantPart p;
    p.variant = part.substr(0, at);
    const char* c = part.data() + at + 1;
    const char* last = part.data() + part.size();
    while (c < last) {
      int index = -1;
      auto [next, ec] = std::from_chars(c, last, index);
      if (ec != std::errc() || index < 0 || static_cast<size_t>(index) >= num_nodes ||
          (next != last && (*next != ',' || next + 1 == last)))
        fail(ErrorKind::kUnsupported, "composed variant '{}': bad node index in '{}'", variant,
             part);
      p.nodes.push_back(index);
      c = next == last ? last : next + 1;
    }
    std::sort(p.nodes.begin(), p.nodes.end());
    parts.push_back(std::move(p));
    start = end + 1;
  }
  return parts;
}

std::string variant_summary(const std::string& variant) {
  if (variant.find('@') == std::string::npos) return variant;
  std::string out;
  size_t start = 0;
  while (start < variant.size()) {
    size_t end = variant.find(';', start);
    if (end == std::string::npos) end = variant.size();
    const std::string part = variant.substr(start, end - start);
    const size_t at = part.find('@');
    const size_t nodes = std::count(part.begin(), part.end(), ',') + 1;
    if (!out.empty()) out += '+';
    out += fmt::format("{}({} node{})", part.substr(0, at), nodes, nodes == 1 ? "" : "s");
    start = end + 1;
  }
  return out;
}

BackendSpec BackendSpec::parse(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return {text, ""};
  return {text.substr(0, slash), text.substr(slash + 1)};
}

}  // namespace collage
