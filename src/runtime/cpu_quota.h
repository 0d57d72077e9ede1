// The CPU time a container may use. A cgroup CPU bandwidth limit (Kubernetes' CPU limit,
// `docker run --cpus`) leaves every CPU in the affinity mask but lets the process run only
// `quota` microseconds per `period`: threads beyond that many CPUs' worth spin and wait on
// each other while the group is throttled. Measured 2026-12-06 on the 2-core EPYC, a cgroup
// v1 limit of one CPU (cpu.cfs_quota_us = cpu.cfs_period_us = 100000), MobileNetV2 on
// onednn-graph: 28.8-30.2 ms a run on 2 threads, 4.8-5.5 on one (2.9 unlimited); ONNX
// Runtime on 2 threads 10.6. So the default thread budget counts the limit too, as Go's
// GOMAXPROCS and the JVM do.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace collage {

// The CPUs' worth of time this process's cgroups allow (the tightest of its cgroup and its
// ancestors, cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded
// up; nullopt where none is set or none can be read. `cgroup_root` is where the cgroup file
// systems are mounted and `proc_self_cgroup` the text of /proc/self/cgroup (tests pass a tree
// of their own).
std::optional<int> cgroup_cpu_limit(const std::filesystem::path& cgroup_root,
                                    const std::string& proc_self_cgroup);
// The same for this process, read once.
std::optional<int> process_cpu_limit();

}  // namespace collage
