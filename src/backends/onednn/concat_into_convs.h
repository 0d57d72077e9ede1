// Concatenations that only convolutions read, never made: a convolution of a channel
// concatenation is the sum of the convolutions of its parts with the matching slices of the
// weights, conv(concat(a, b), [Wa Wb]) = conv(a, Wa) + conv(b, Wb), and oneDNN adds the second
// onto the first as a sum post-op. So the concatenation's copy (every byte of it written and
// read once more) becomes one more primitive per part, each reading its part where its
// producer wrote it.
// Why: oneDNN 2.6 can't write a convolution's output into a channel slice of a channels-last
// buffer (docs/DESIGN.md, "In-place concat"), and the channel-blocked in-place concatenation
// moves its producers to slower kernels unless two or more concatenations share the buffer
// (concat_in_place.h). SqueezeNet's fire modules concatenate two 64..256-channel branches
// for the next 1x1 conv (and U-Net, FPN and CSP necks concatenate for a conv too):
// measured (2 threads, this EPYC, DNNL_VERBOSE), SqueezeNet 1.1's eight concats took 0.55 of
// its 2.9 ms.
#pragma once

#include "collage/graph.h"

namespace collage::onednn {

// `region` with each channel Concat whose readers are all group-1 convolutions with
// constant weights (none a region output, two parts, each a float32 value of a multiple of
// 16 channels) removed: each reader becomes one conv per part (the first with
// the bias) and Adds summing them into the reader's output. The other nodes keep their names
// and order.
Graph split_concats_into_convs(const Graph& region);

}  // namespace collage::onednn
