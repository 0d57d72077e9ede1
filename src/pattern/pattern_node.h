// The tree behind a Pattern. Kept out of the public header: users build patterns with the
// free functions in collage/pattern.h.
#pragma once

#include <string>
#include <vector>

#include "collage/pattern.h"

namespace collage::detail {

struct PatternNode {
  enum class Kind { kAny, kConstant, kAbsent, kOp, kAlt };
  Kind kind = Kind::kAny;
  std::vector<std::string> op_types;  // kOp: any of these
  std::vector<Pattern> inputs;        // kOp: positional input patterns; kAlt: the alternatives
  std::vector<NodePredicate> predicates;
  std::vector<std::string> predicate_names;
};

}  // namespace collage::detail
