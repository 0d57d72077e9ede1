// cgroup CPU bandwidth limits (cpu_quota.h says why).
#include "runtime/cpu_quota.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace collage {
namespace {

std::optional<std::string> read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// CPUs' worth of `quota` per `period` microseconds, rounded up; nullopt for no limit.
std::optional<int> cpus_of(double quota, double period) {
  if (!(quota > 0) || !(period > 0)) return std::nullopt;
  return std::max(1, static_cast<int>(std::ceil(quota / period - 1e-9)));
}

// cgroup v2: "max 100000" or "150000 100000".
std::optional<int> v2_limit(const std::filesystem::path& dir) {
  const std::optional<std::string> text = read_text(dir / "cpu.max");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  return cpus_of(std::atof(quota.c_str()), period);
}

// cgroup v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
std::optional<int> v1_limit(const std::filesystem::path& dir) {
  const std::optional<std::string> quota = read_text(dir / "cpu.cfs_quota_us");
  const std::optional<std::string> period = read_text(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return cpus_of(std::atof(quota->c_str()), std::atof(period->c_str()));
}

// The tightest limit of `path` (relative to `mount`) and its ancestors up to the mount.
// Without a cgroup namespace a container sees its host path in /proc/self/cgroup and its own
// cgroup at the mount: the walk reaches that too.
template <class Limit>
std::optional<int> tightest(const std::filesystem::path& mount, std::filesystem::path path,
                            Limit limit) {
  std::optional<int> best;
  for (;;) {
    if (std::optional<int> here = limit(mount / path.relative_path()))
      best = best ? std::min(*best, *here) : *here;
    if (path.relative_path().empty()) break;
    path = path.parent_path();
  }
  return best;
}

}  // namespace

std::optional<int> cgroup_cpu_limit(const std::filesystem::path& cgroup_root,
                                    const std::string& proc_self_cgroup) {
  std::optional<int> best;
  auto take = [&](std::optional<int> limit) {
    if (limit) best = best ? std::min(*best, *limit) : *limit;
  };
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-ID:controller-list:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::filesystem::path path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      for (const char* mount : {"", "unified"}) take(tightest(cgroup_root / mount, path, v2_limit));
      continue;
    }
    std::vector<std::string> names;
    std::istringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    for (const std::string& mount : {controllers, std::string("cpu")})
      take(tightest(cgroup_root / mount, path, v1_limit));
  }
  return best;
}

std::optional<int> process_cpu_limit() {
  static const std::optional<int> limit = [] {
    const std::optional<std::string> self = read_text("/proc/self/cgroup");
    return self ? cgroup_cpu_limit("/sys/fs/cgroup", *self) : std::nullopt;
  }();
  return limit;
}

}  // namespace collage
