// TODO(helper): op definitions of this group.
#include "ops/register.h"

namespace collage::ops {

void register_reduction_ops(OpRegistry& registry) {}

}  // namespace collage::ops
