#include "plan/hardware.h"

#include "collage/device.h"
#include "util/cpu_info.h"
#include "util/openmp_runtime.h"

#include <fmt/format.h>

#include <algorithm>

namespace collage {

std::string Hardware::fingerprint() const {
  std::string line = fmt::format("{} | {} | {} threads", cpu_model, isa, threads);
  if (!openmp.empty()) line += " | " + openmp;
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
  hw.cpu_model = this_cpu().model;
  hw.isa = this_cpu().isa;
  if (openmp_runtime() == "libomp") hw.openmp = "libomp";
  return hw;
}

}  // namespace collage
