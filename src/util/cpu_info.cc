#include "util/cpu_info.h"

#include <fstream>
#include <set>
#include <sstream>

namespace collage {

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
    return cpu;
  }();
  return info;
}

}  // namespace collage
