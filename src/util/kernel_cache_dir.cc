#include "util/kernel_cache_dir.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "collage/error.h"

namespace collage {
namespace fs = std::filesystem;

namespace {

fs::path preferred_dir(const std::string& kind) {
  if (const char* d = std::getenv("COLLAGE_CACHE_DIR"); d && *d) return fs::path(d) / kind;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "collage" / kind;
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".cache" / "collage" / kind;
}

// The temporary folders this process made, by kind: removed when it exits normally, since
// nothing in them is meant to outlive it (a kernel loaded from one stays mapped). Before,
// each process left its folder behind (one per `make test`, from the Halide test of an
// unwritable cache dir). Only by the process that made them: a forked child that exits must
// not take its parent's files.
struct TempDirs {
  std::mutex mutex;
  std::map<std::string, fs::path> by_kind;
  pid_t owner = getpid();
  ~TempDirs() {
    if (getpid() != owner) return;
    std::error_code ec;
    for (const auto& [kind, path] : by_kind) fs::remove_all(path, ec);
  }
};

}  // namespace

KernelCacheDir kernel_cache_dir(const std::string& kind) {
  std::error_code ec;
  fs::path dir = preferred_dir(kind);
  fs::create_directories(dir, ec);
  if (!ec && access(dir.c_str(), W_OK) == 0) return {dir, true};
  static TempDirs temps;
  std::lock_guard<std::mutex> lock(temps.mutex);
  fs::path& temp = temps.by_kind[kind];
  if (temp.empty()) {
    std::string pattern = (fs::temp_directory_path(ec) / ("collage-" + kind + "-XXXXXX")).string();
    if (!mkdtemp(pattern.data()))
      fail(ErrorKind::kBackend, "{}: cannot create cache dir {} nor a temp dir", kind,
           dir.string());
    temp = pattern;
    spdlog::warn("{}: cannot use cache dir {} ({}); compiled kernels will not persist", kind,
                 dir.string(), ec ? ec.message() : "not writable");
  }
  return {temp, false};
}

std::string hash_hex(const std::string& text) {
  // Two FNV-1a 64 lanes with different offsets: 128 bits, so collisions are not a concern.
  uint64_t a = 14695981039346656037ULL, b = 0x9ae16a3b2f90404fULL;
  for (unsigned char c : text) {
    a = (a ^ c) * 1099511628211ULL;
    b = (b ^ c) * 0x100000001b3ULL + 0x5bd1e995ULL;
  }
  return fmt::format("{:016x}{:016x}", a, b);
}

void write_file_atomically(const fs::path& path, const std::string& bytes) {
  static std::atomic<int> counter{0};
  const fs::path temp = path.parent_path() /
                        fmt::format("{}.{}.{}.tmp", path.filename().string(), getpid(), counter++);
  {
    std::ofstream out(temp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      fail(ErrorKind::kBackend, "cannot write {}", temp.string());
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    fail(ErrorKind::kBackend, "cannot write {}", path.string());
  }
}

}  // namespace collage
