// Resize / Upsample in the forms oneDNN's resampling primitive does not compute
// (resample_form): nearest with a factor that is not an integer or with another rounding,
// cubic, linear with align_corners or asymmetric coordinates, any output size. Collage's own
// program step over channels-last data, from the reference's own taps (ops::resize_taps: the
// same source indices and weights per output coordinate), so that an onednn-graph region
// keeps such a resize instead of cutting around a step of another backend: each output pixel
// is a weighted sum of a few input pixels, each a contiguous vector of channels.
//
// Why: `F.interpolate(x, size=...)` to a size that is no integer multiple, or in bicubic
// mode, between two convolutions (a decoder, an FPN, a UNet) split the region there, with a
// layout copy to and from row-major around the other backend's kernel (measured in
// docs/DESIGN.md, "onednn-graph: no holes in a region").
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether Resize/Upsample node `n` is a form this step computes and resample_form does not:
// float32, rank 3-5, batch and channels kept, constant scales or sizes, no sample outside the
// input (tf_crop_and_resize's extrapolation), no axes or aspect-ratio policy.
bool taps_resize_takes(const Graph& g, const Node& n);

// Emits group `sub` headed by such a node: the resize as one step reading its input
// channels-last and writing its output so, then the group's elementwise tail as primitives.
void emit_taps_resize(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kTapsResizeStep = "collage:taps_resize";

}  // namespace collage::onednn
