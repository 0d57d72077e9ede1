// A compiled piece of a model. It runs on plain row-major tensors at its boundary (in the
// order of its subgraph's inputs and outputs); inside it may use any layout. Everything
// that can be done once (weight packing, primitive creation) happens before run().
#pragma once

#include <span>

#include "collage/tensor.h"

namespace collage {

class Kernel {
 public:
  virtual ~Kernel() = default;
  // `outputs` are preallocated views with the inferred shapes; run() fills them.
  virtual void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) = 0;
};

}  // namespace collage
