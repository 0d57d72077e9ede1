// A compiled piece of a model. It runs on plain row-major tensors at its boundary (in the
// order of its subgraph's inputs and outputs); inside it may use any layout. Everything
// that can be done once (weight packing, primitive creation) happens before run().
#pragma once

#include <span>
#include <vector>

#include "collage/tensor.h"

namespace collage {

// Output `output` of a kernel may be given the buffer of its input `input` (indices into
// run()'s spans).
struct InPlace {
  int output = 0;
  int input = 0;
  bool operator==(const InPlace&) const = default;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // `outputs` are preallocated views with the inferred shapes; run() fills them.
  virtual void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) = 0;

  // The outputs this kernel may write over one of its inputs. The runtime then may (it does
  // not have to) give such an output the same buffer as the input, where nothing reads the
  // input after this kernel: a kernel that starts by copying the input into its output (a
  // residual summed onto the destination) can then skip the copy. run() must be correct both
  // when they share a buffer and when they do not. Default: none, so a kernel that says
  // nothing always gets buffers of its own.
  virtual std::vector<InPlace> in_place() const { return {}; }
};

}  // namespace collage
