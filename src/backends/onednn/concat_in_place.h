// Channel concatenations that move no data inside an onednn-graph region: each input is
// written once, by its producer, into its slice of one shared buffer (the "root"), and the
// concatenation is that buffer (or a run of slices of it).
//
// Why: a densely connected block (DenseNet: layer k reads the concatenation of the block
// input and every earlier layer's output) concatenates a growing list of the same values, so
// copying concats move O(layers^2) data. Measured on torchvision's DenseNet-121 (2 threads,
// this repo's EPYC Zen 5 box, DNNL_VERBOSE per-primitive times of one run): 58 concat
// primitives 6.3 ms of 36.5 ms in channels-last; as copies into slices 566 reorders, 9.6 ms.
// A slice [c0, c0 + c) of a batch-1 tensor is one contiguous block only in a channel-blocked
// layout (nChw16c and its 3-D/5-D forms) with c0 and c multiples of 16, so the root is kept
// in that layout and its producers write it (docs/DESIGN.md, "Concatenations in place").
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "collage/graph.h"

namespace collage::onednn {

// Where a value lives: in root buffer `root`, from channel `offset` on.
struct ConcatHome {
  size_t root = 0;
  int64_t offset = 0;
};

struct ConcatPlan {
  // Per root buffer: the value whose shape it has (a concatenation's output).
  std::vector<ValueId> roots;
  // Every value kept in a root: concatenated inputs and concatenations done in place.
  std::map<ValueId, ConcatHome> homes;
  // The number of concatenations that move no data.
  int in_place = 0;
};

// The plan for `region` (nodes in topological order). Rule, last concatenation first: a
// batch-1 channel Concat of float32 values produced inside the region (each a multiple of 16
// channels, none a region output, none repeated, none already placed) becomes a root, its
// inputs placed in it side by side; a Concat whose inputs are already placed side by side in
// one root (an earlier concatenation of a prefix of the same list, as in DenseNet) becomes
// that run of slices. Any other Concat copies, as before. Only roots that serve at least
// `min_concats` concatenations are kept (a root for one concatenation saves one copy but
// moves its producers to the channel-blocked layout).
ConcatPlan plan_concats_in_place(const Graph& region, int min_concats = 2);

}  // namespace collage::onednn
