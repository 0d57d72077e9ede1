// What the per-backend Google Benchmark programs share: a console reporter that keeps each
// benchmark's time for the comparison table printed at the end, and the thread budget read
// from the environment (benchmarks default to one thread: kernel speed, not scaling).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/session.h"
#include "runtime/threads.h"

namespace collage::bench {

class TimeKeepingReporter : public benchmark::ConsoleReporter {
 public:
  // With `cpu_time`, the times kept are the benchmark thread's CPU time, not wall time: for
  // one-thread kernels on a machine shared with other work, preemption then does not count.
  // `aggregate`: which statistic of repeated runs to keep ("median"; "min" where the
  // benchmark registers it, the least disturbed run on a busy machine).
  explicit TimeKeepingReporter(bool cpu_time = false, std::string aggregate = "median")
      : cpu_time_(cpu_time), aggregate_(std::move(aggregate)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    // The median when repeated (--benchmark_repetitions), else the one run.
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const double t = cpu_time_ ? r.GetAdjustedCPUTime() : r.GetAdjustedRealTime();
      const double s = t / benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == aggregate_)
        seconds_[r.run_name.function_name] = s;
      else if (r.run_type == Run::RT_Iteration && r.iterations > 0)
        seconds_.emplace(r.run_name.function_name, s);
    }
  }

  // Seconds per iteration of benchmark `name`, or -1 when it did not run.
  double seconds(const std::string& name) const {
    auto it = seconds_.find(name);
    return it == seconds_.end() ? -1.0 : it->second;
  }
  const std::map<std::string, double>& all_seconds() const { return seconds_; }

 private:
  bool cpu_time_;
  std::string aggregate_;
  std::map<std::string, double> seconds_;
};

// The benchmark's thread count; kernels are compiled for it (bench_options()).
inline int& bench_threads() {
  static int threads = 1;
  return threads;
}
// Sets it (0 = every core) on this thread too, for OpenMP kernels.
inline void set_bench_threads(int threads) {
  bench_threads() = resolve_threads(threads);
  use_threads_on_this_thread(bench_threads());
}
// From `variable`, else `fallback`.
inline void set_threads_from_env(const char* variable, int fallback = 1) {
  const char* env = std::getenv(variable);
  set_bench_threads(env ? std::atoi(env) : fallback);
}
inline CompileOptions bench_options() {
  return CompileOptions{"", bench_threads()};
}

// Registers the "min" statistic on `b` (kept by TimeKeepingReporter with aggregate "min"):
// with --benchmark_repetitions, the least disturbed run on a shared machine.
inline benchmark::internal::Benchmark* with_min_statistic(benchmark::internal::Benchmark* b) {
  return b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

// Runs the registered benchmarks into `reporter`, saying first which time its table shows.
inline int run_benchmarks(int* argc, char** argv, benchmark::BenchmarkReporter& reporter) {
  benchmark::Initialize(argc, argv);
  std::printf("table times: %s\n",
              bench_threads() == 1
                  ? "CPU time of the one thread (preemption does not count; shared caches still do)"
                  : "wall time");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace collage::bench
