// The stage choice of a region's program kept on disk (lanes.h, LaneMemo), so that every
// compile of one region on one machine runs its steps the same way: the tuner's measurement
// of the region, its final timing, and every `collage run` of the plan. Choosing costs up to
// ~25 runs of the region per compile (~4 where the first look finds nothing worth more), too,
// which a recalled choice skips.
//
// One small file per region under $COLLAGE_CACHE_DIR/onednn-lanes (util/kernel_cache_dir.h),
// named by a hash of everything the program and its timing depend on: the region's canonical
// text, its Winograd nodes, the backend's version, and the machine with the thread count. A
// file that cannot be read or does not fit the program (lanes.h, stages_fit) is chosen anew
// and rewritten.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/onednn/kernels.h"
#include "backends/onednn/lanes.h"
#include "collage/graph.h"

namespace collage::onednn {

// The memo of `region` (as the program was built from it) compiled with `algorithms` (per
// node), on `threads` threads. Never throws: nullptr (nothing remembered, every compile
// measures) when no cache directory can be had.
std::unique_ptr<LaneMemo> region_lane_memo(const Graph& region,
                                           const std::vector<ConvAlgorithm>& algorithms,
                                           int threads);

// The text of a stage list as the memo stores it, and back (nullopt when it is not one).
std::string stages_text(const std::vector<LaneStage>& stages);
std::optional<std::vector<LaneStage>> parse_stages(const std::string& text);

}  // namespace collage::onednn
