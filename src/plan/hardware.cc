#include "plan/hardware.h"

#include "collage/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace collage {

std::string Hardware::fingerprint() const {
  std::string line = fmt::format("{} | {} | {} threads", cpu_model, isa, threads);
  if (!devices.empty()) line += " | " + devices;
  return line;
}

Hardware with_devices(Hardware hw, const std::vector<const Device*>& devices) {
  std::vector<const Device*> seen;
  for (const Device* d : devices) {
    if (!d || std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    hw.devices += (hw.devices.empty() ? "" : "; ") + d->description();
  }
  return hw;
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
