// cgroup CPU bandwidth limits (runtime/cpu_quota.h), read from trees laid out as the kernel
// mounts them: cgroup v2 (cpu.max, also under a hybrid mount's "unified"), cgroup v1 (the
// cpu controller alone or co-mounted with cpuacct), a limit on an ancestor, a container that
// sees its host path, and no limit at all. tests/cli/test_thread_affinity.py runs the CLI in a
// real cgroup where the machine lets it make one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/cpu_quota.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("collage-cgroup-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& file, const std::string& text) {
    fs::create_directories((root_ / file).parent_path());
    std::ofstream(root_ / file) << text;
  }
  fs::path root_;
};

TEST_F(CgroupTree, V2LimitsRoundUpAndTheTightestAncestorWins) {
  write("kubepods/pod1/ctr/cpu.max", "150000 100000\n");  // 1.5 CPUs -> 2
  write("kubepods/pod1/cpu.max", "max 100000\n");
  write("kubepods/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/kubepods/pod1/ctr\n"), 2);
  write("kubepods/pod1/cpu.max", "50000 100000\n");  // the pod: half a CPU -> 1
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/kubepods/pod1/ctr\n"), 1);
  write("kubepods/pod1/cpu.max", "max 100000\n");
  write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/kubepods/pod1/ctr\n"), std::nullopt);
}

TEST_F(CgroupTree, V1CpuControllerAloneOrCoMountedAndAHybridUnifiedMount) {
  write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "4:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n0::/\n"), 3);
  write("cpu/cpu.cfs_quota_us", "-1\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  write("cpu/job/cpu.cfs_quota_us", "100000\n");
  write("cpu/job/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "1:cpu:/job\n0::/\n"), 1);
  write("unified/svc/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "1:cpu:/\n0::/svc\n"), 2);
}

TEST_F(CgroupTree, AContainerSeeingItsHostPathReadsItsOwnRoot) {
  // No cgroup namespace: /proc/self/cgroup names the host's path, the mount is the
  // container's own cgroup.
  write("cpu.max", "100000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/system.slice/docker-1234.scope\n"), 1);
}

TEST_F(CgroupTree, NoLimitNoFilesOrGarbageIsNone) {
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/\n"), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit(root_, ""), std::nullopt);
  write("cpu.max", "garbage\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "0::/\n"), std::nullopt);
  write("cpu/cpu.cfs_quota_us", "-1\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(root_, "1:cpu:/\nnot a line\n"), std::nullopt);
}

}  // namespace
}  // namespace collage
