#include "plan/hardware.h"

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

namespace collage {

std::string Hardware::fingerprint() const {
  return fmt::format("{} | {} | {} threads", cpu_model, isa, threads);
}

Hardware this_machine(int threads) {
  Hardware hw;
  hw.threads = threads;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && hw.cpu_model.empty()) hw.cpu_model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream in(value);
      for (std::string f; in >> f;) flags.insert(f);
    }
  }
  const char* interesting[] = {"avx2",     "fma",         "avx512f",     "avx512bw",
                               "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile"};
  for (const char* f : interesting)
    if (flags.count(f)) hw.isa += (hw.isa.empty() ? "" : ",") + std::string(f);
  if (hw.cpu_model.empty()) hw.cpu_model = "unknown cpu";
  return hw;
}

}  // namespace collage
