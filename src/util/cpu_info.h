// The host CPU as measurements see it: its model name and the vector extensions that matter.
// In util (not plan/hardware.h) so that backends can key what they keep on disk by it (the
// onednn lanes memo) without reaching up a layer.
#pragma once

#include <cstddef>
#include <string>

namespace collage {

struct CpuInfo {
  std::string model;  // /proc/cpuinfo "model name"; "unknown cpu" when it says none
  std::string isa;    // the ones that matter: avx2, fma, avx512f, ..., comma-separated
  // The largest cache CPU 0 reads through (sysfs's highest cache level), 0 when unknown.
  size_t last_level_cache_bytes = 0;
};

// Read once from /proc/cpuinfo and /sys/devices/system/cpu.
const CpuInfo& this_cpu();

}  // namespace collage
