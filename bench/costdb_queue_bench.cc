// The cost database's job queue under synthetic load: how many jobs a second one database
// sustains, and what one job costs a worker in queue operations, without any measuring.
// A round publishes `--jobs` jobs (requests of `--request-bytes` random bytes, the size of a
// real job's subgraph), then `C` client threads, each with its own connection (as C worker
// machines would have), claim and complete them (claim_next, then put: exactly what
// `collage measure-worker` does around a measurement) until the queue is empty.
//
//   build/bench/bench_costdb_queue --cost-db postgresql://... [--clients 1,2,4,8,16]
//                                  [--jobs 2000] [--request-bytes 3000] [--json FILE]
//
// bench/scale_out.py runs it against a server it starts; see bench/results/scale-out.md.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "search/cost_db.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the cost database's job queue under synthetic load"};
  std::string location;
  std::vector<int> clients = {1, 2, 4, 8};
  int jobs = 2000, request_bytes = 3000;
  std::string json_path;
  app.add_option("--cost-db", location, "the database (a postgresql:// URL or a SQLite file)")
      ->required();
  app.add_option("--clients", clients, "client counts, one round each")->delimiter(',');
  app.add_option("--jobs", jobs, "jobs per round");
  app.add_option("--request-bytes", request_bytes, "bytes of each job's request");
  app.add_option("--json", json_path, "also write the results here");
  CLI11_PARSE(app, argc, argv);

  collage::CostDb db(location);
  std::mt19937 random(7);
  std::string request(static_cast<size_t>(request_bytes), '\0');
  for (char& c : request) c = static_cast<char>(random());
  nlohmann::json results = nlohmann::json::array();
  fmt::print("{:>8} {:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "clients", "jobs", "jobs/s",
             "claim p50", "claim p99", "store p50", "store p99", "publish/s");
  const auto stamp = std::chrono::system_clock::now().time_since_epoch().count();
  for (size_t round = 0; round < clients.size(); ++round) {
    std::vector<collage::MeasureJob> batch;
    for (int i = 0; i < jobs; ++i) {
      collage::MeasureJob j;
      j.row.key = fmt::format("bench-{}-{}-{}", stamp, round, i);
      j.row.backend = "bench";
      j.row.hardware = "bench machine | 1 threads";
      j.row.subgraph = "synthetic job " + std::to_string(i);
      j.machine = "bench machine";
      j.threads = 1;
      j.backend_version = "bench@1";
      j.request = request;
      batch.push_back(std::move(j));
    }
    auto p0 = Clock::now();
    db.engine().publish(batch);
    const double publish_ms = ms_between(p0, Clock::now());
    std::mutex mutex;
    std::vector<double> claim_ms, store_ms;
    std::atomic<int> done{0};
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients[round]; ++c)
      threads.emplace_back([&, c] {
        collage::CostDb mine(location);
        collage::JobFilter filter;
        filter.machine = "bench machine";
        filter.max_threads = 1;
        filter.backend_versions = {"bench@1"};
        const std::string owner = fmt::format("bench-client-{}", c);
        std::vector<double> claims, stores;
        while (true) {
          auto a = Clock::now();
          std::optional<collage::MeasureJob> job = mine.engine().claim_next(filter, owner, 30);
          auto b = Clock::now();
          if (!job) break;
          collage::StoredRecord row = job->row;
          row.record.milliseconds = 1.0;
          row.record.measured_by = owner;
          mine.engine().put(row);
          claims.push_back(ms_between(a, b));
          stores.push_back(ms_between(b, Clock::now()));
          ++done;
        }
        std::lock_guard<std::mutex> lock(mutex);
        claim_ms.insert(claim_ms.end(), claims.begin(), claims.end());
        store_ms.insert(store_ms.end(), stores.begin(), stores.end());
      });
    for (std::thread& t : threads) t.join();
    const double wall_s = ms_between(t0, Clock::now()) / 1000;
    const double rate = done / wall_s;
    fmt::print("{:>8} {:>8} {:>10.0f} {:>10.2f}ms {:>10.2f}ms {:>10.2f}ms {:>10.2f}ms {:>12.0f}\n",
               clients[round], done.load(), rate, percentile(claim_ms, 0.5),
               percentile(claim_ms, 0.99), percentile(store_ms, 0.5), percentile(store_ms, 0.99),
               jobs / (publish_ms / 1000));
    results.push_back({{"clients", clients[round]},
                       {"jobs", done.load()},
                       {"jobs_per_s", rate},
                       {"claim_ms_p50", percentile(claim_ms, 0.5)},
                       {"claim_ms_p99", percentile(claim_ms, 0.99)},
                       {"store_ms_p50", percentile(store_ms, 0.5)},
                       {"store_ms_p99", percentile(store_ms, 0.99)},
                       {"publish_jobs_per_s", jobs / (publish_ms / 1000)}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  return 0;
}
