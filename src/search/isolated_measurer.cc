#include "search/isolated_measurer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>

#include <spdlog/spdlog.h>

#include "collage/backend.h"
#include "collage/model.h"
#include "collage/session.h"
#include "plan/hardware.h"

extern char** environ;

namespace collage {
namespace {

WorkerCommand& worker_command() {
  static WorkerCommand command;
  return command;
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    // MSG_NOSIGNAL: a worker that died must give us EPIPE, not kill us with SIGPIPE.
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Protocol: a request is header lines then the model bytes:
//   backend NAME \n variant NAME \n threads N \n verify 0|1 \n budget_ms X \n
//   evict_bytes N \n [other_kernels 1 \n] [abandon_above_ms X \n] model NBYTES \n <bytes>
// and the answer one line: "ok MS", "ok MS NOTE" (CostRecord::reason of an ok record) or
// "fail REASON". (An empty variant is "variant " + "".)
// abandon_above_ms (Measurer::time_kernel) only where there is one: a distributed job's
// request, which never has one, reads the same to workers built before it. other_kernels
// (BetweenRuns) only where nothing is read between runs: an eviction implies it.
std::string encode_request(const std::string& model, const Candidate& c, const MeasureOptions& o,
                           const BetweenRuns& between, double abandon_above_ms) {
  std::string optional = between.other_kernels && !between.read_bytes ? "other_kernels 1\n" : "";
  if (abandon_above_ms < Measurer::kNeverAbandon)
    optional += fmt::format("abandon_above_ms {:.17g}\n", abandon_above_ms);
  return fmt::format(
             "backend {}\nvariant {}\nthreads {}\nverify {}\nbudget_ms {}\nevict_bytes {}\n{}model "
             "{}\n",
             c.backend->name(), c.variant, c.threads, o.verify ? 1 : 0, o.budget_ms,
             between.read_bytes, optional, model.size()) +
         model;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

// Blocking reads on the worker side (plain fds; the parent enforces the timeouts).
bool read_exact(int fd, char* data, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, data, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool read_line(int fd, std::string& line) {
  line.clear();
  char c;
  while (true) {
    ssize_t r = read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

// `line`'s value after "KEY ", if it starts so.
bool header_value(const std::string& line, const char* key, std::string& value) {
  std::string prefix = std::string(key) + " ";
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  value = line.substr(prefix.size());
  return true;
}

// The next line's value, if it is "KEY value"; false otherwise.
bool header(int fd, const char* key, std::string& value) {
  std::string line;
  return read_line(fd, line) && header_value(line, key, value);
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

void set_measure_worker_command(WorkerCommand command) {
  worker_command() = std::move(command);
}
const WorkerCommand& measure_worker_command() {
  return worker_command();
}

IsolatedWorker::IsolatedWorker(WorkerCommand command, double timeout_s)
    : command_(std::move(command)), timeout_s_(timeout_s) {}

IsolatedWorker::~IsolatedWorker() {
  stop();
}

void IsolatedWorker::start() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail(ErrorKind::kInternal, "socketpair: {}", std::strerror(errno));
  std::vector<std::string> args = {command_.executable};
  for (const std::string& p : command_.plugins) {
    args.push_back("--backend-plugin");
    args.push_back(p);
  }
  args.push_back("measure-worker");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  // posix_spawn execs at once: no OpenMP state of ours survives into the worker.
  int rc = posix_spawn(&pid_, command_.executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    pid_ = -1;
    fail(ErrorKind::kInternal, "cannot start measure worker '{}': {}", command_.executable,
         std::strerror(rc));
  }
  fd_ = fds[0];
  ++starts_;
}

void IsolatedWorker::stop() {
  if (fd_ >= 0) close(fd_);  // the worker sees EOF and exits
  fd_ = -1;
  if (pid_ > 0) {
    // Give a healthy worker a moment to exit on EOF before killing it.
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      usleep(2000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

CostRecord IsolatedWorker::lost_worker(const std::string& why) {
  CostRecord r = CostRecord::failure(why);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    int status = 0;
    kill(pid_, SIGKILL);  // no-op when it is already dead
    waitpid(pid_, &status, 0);
    if (r.reason.empty())
      r.reason = WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL
                     ? "crashed: " + signal_name(WTERMSIG(status))
                     : fmt::format("worker exited with status {}", WEXITSTATUS(status));
  }
  pid_ = -1;
  spdlog::warn("measure worker lost ({}); restarting it for the next candidate", r.reason);
  return r;
}

std::string measure_request(const KernelJob& job, const Candidate& candidate,
                            const MeasureOptions& options, double abandon_above_ms) {
  return encode_request(model_to_bytes(job.subgraph), candidate, options, job.between,
                        abandon_above_ms);
}

CostRecord IsolatedWorker::measure(const KernelJob& job, const Candidate& candidate,
                                   const MeasureOptions& options, double abandon_above_ms) {
  return measure(measure_request(job, candidate, options, abandon_above_ms));
}

CostRecord IsolatedWorker::measure(const std::string& request) {
  if (pid_ < 0) start();
  if (!write_all(fd_, request.data(), request.size())) return lost_worker("");
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  std::string line;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return lost_worker(fmt::format("timed out after {:g} s", timeout_s_));
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;  // the deadline check above ends it
    char buf[256];
    ssize_t r = recv(fd_, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return lost_worker("");
    line.append(buf, static_cast<size_t>(r));
    size_t nl = line.find('\n');
    if (nl == std::string::npos) continue;
    line.resize(nl);
    break;
  }
  CostRecord record;
  if (line.rfind("ok ", 0) == 0) {
    char* end = nullptr;
    record.milliseconds = std::strtod(line.c_str() + 3, &end);
    const size_t parsed = static_cast<size_t>(end - line.c_str());
    if ((parsed != line.size() && line[parsed] != ' ') || !(record.milliseconds >= 0))
      return lost_worker("bad worker answer: " + line);
    if (parsed != line.size()) record.reason = line.substr(parsed + 1);  // a note (CostRecord)
    return record;
  }
  return CostRecord::failure(line.rfind("fail ", 0) == 0 ? line.substr(5)
                                                         : "bad worker answer: " + line);
}

int run_measure_worker() {
  // A kernel hung in here must not outlive a tuner that was killed (Ctrl-C) meanwhile.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The protocol owns the original stdout; anything a kernel prints goes to stderr.
  int out = dup(1);
  dup2(2, 1);
  std::unique_ptr<Measurer> measurer;
  const Hardware machine = this_machine(0);
  while (true) {
    std::string backend, variant, threads, verify, budget, evict, others, abandon, size, line;
    if (!header(0, "backend", backend)) return 0;  // EOF: the tuner is done
    if (!header(0, "variant", variant) || !header(0, "threads", threads) ||
        !header(0, "verify", verify) || !header(0, "budget_ms", budget) ||
        !header(0, "evict_bytes", evict) || !read_line(0, line))
      return 2;
    if (header_value(line, "other_kernels", others) && !read_line(0, line)) return 2;
    if (header_value(line, "abandon_above_ms", abandon) && !read_line(0, line)) return 2;
    if (!header_value(line, "model", size)) return 2;
    std::string bytes(std::stoull(size), '\0');
    if (!read_exact(0, bytes.data(), bytes.size())) return 2;
    std::string answer;
    try {
      Candidate candidate;
      candidate.threads = std::stoi(threads);
      candidate.variant = variant;
      candidate.backend = &BackendRegistry::global().get(backend);
      MeasureOptions o;
      o.verify = verify == "1";
      o.budget_ms = std::stod(budget);
      // Kept across requests: it caches reference outputs per subgraph, and its eviction
      // buffer serves every eviction size up to the largest asked for.
      if (!measurer || measurer->options().verify != o.verify ||
          measurer->options().budget_ms != o.budget_ms)
        measurer = std::make_unique<Measurer>(nullptr, machine, o);
      LoadOptions lo;
      lo.optimize = false;  // measure the subgraph exactly as the tuner extracted it
      Graph g = load_model_from_bytes(bytes, "", lo);
      candidate.nodes.resize(g.num_nodes());
      for (size_t i = 0; i < candidate.nodes.size(); ++i)
        candidate.nodes[i] = static_cast<NodeId>(i);
      // The tuner chose the eviction from the whole model, which this subgraph is a part of.
      BetweenRuns between;
      between.read_bytes = std::stoull(evict);
      between.other_kernels = between.read_bytes > 0 || others == "1";
      const KernelJob job = kernel_job(g, candidate, machine, between);
      CostRecord r = measurer->measure_now(
          job, candidate, abandon.empty() ? Measurer::kNeverAbandon : std::stod(abandon));
      answer = r.ok ? fmt::format("ok {:.17g}{}{}\n", r.milliseconds, r.reason.empty() ? "" : " ",
                                  one_line(r.reason))
                    : "fail " + one_line(r.reason) + "\n";
    } catch (const std::exception& e) {
      answer = "fail " + one_line(e.what()) + "\n";
    }
    if (!write_all(out, answer.data(), answer.size())) return 0;
  }
}

}  // namespace collage
