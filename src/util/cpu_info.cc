#include "util/cpu_info.h"

#include <fstream>
#include <set>
#include <sstream>

namespace collage {
namespace {

// The size of CPU 0's highest-level cache as sysfs describes it ("491520K"), 0 when it says
// nothing (a container without /sys, a CPU without caches listed).
size_t read_last_level_cache_bytes() {
  int best_level = 0;
  size_t best_bytes = 0;
  for (int index = 0;; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size");
    if (!level_file || !size_file) break;
    int level = 0;
    size_t size = 0;
    std::string unit;
    level_file >> level;
    size_file >> size >> unit;
    if (unit == "K") size <<= 10;
    if (unit == "M") size <<= 20;
    if (unit == "G") size <<= 30;
    if (level > best_level || (level == best_level && size > best_bytes)) {
      best_level = level;
      best_bytes = size;
    }
  }
  return best_bytes;
}

}  // namespace

const CpuInfo& this_cpu() {
  static const CpuInfo info = [] {
    CpuInfo cpu;
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    std::set<std::string> flags;
    while (std::getline(cpuinfo, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
      std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (key == "model name" && cpu.model.empty()) cpu.model = value;
      if (key == "flags" && flags.empty()) {
        std::istringstream in(value);
        for (std::string f; in >> f;) flags.insert(f);
      }
    }
    const char* interesting[] = {"avx2",     "fma",         "avx512f",     "avx512bw",
                                 "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile"};
    for (const char* f : interesting)
      if (flags.count(f)) cpu.isa += (cpu.isa.empty() ? "" : ",") + std::string(f);
    if (cpu.model.empty()) cpu.model = "unknown cpu";
    cpu.last_level_cache_bytes = read_last_level_cache_bytes();
    return cpu;
  }();
  return info;
}

}  // namespace collage
