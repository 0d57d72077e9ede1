#include "backends/halide/jit_cache.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "collage/error.h"
#include "util/kernel_cache_dir.h"

extern char** environ;

namespace collage::halide_backend {
namespace {

namespace fs = std::filesystem;

// Bumped whenever lowering or scheduling changes what a description compiles to, so stale
// objects in the disk cache are never reused.
// 9: kernel files named by XXH3-128 (the names of 8 are never looked up again).
constexpr const char* kCodegenVersion = "collage-halide-codegen-9";

struct State {
  std::mutex mutex;
  std::map<std::string, EntryPoint> kernels;  // key -> entry point
  CacheStats stats;
  void* runtime = nullptr;
  int threads = 0;  // 0: Halide's default (all cores)
  std::string dir;  // directory used so far ("" until the first kernel)
  bool persistent = true;
};

State& state() {
  static State s;
  return s;
}

// A kernel file's name: XXH3's 128-bit hash of its description. A collision would load
// another pipeline's kernel, so the hash must be a real one (two FNV lanes over the same
// bytes, used before codegen 9, are correlated: not 128 independent bits).
std::string hash_hex(const std::string& text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// The directory to build in: the preferred cache, or (warned once) a private temp dir.
fs::path build_dir(State& s) {
  KernelCacheDir dir = kernel_cache_dir("halide");
  s.persistent = dir.persistent;
  return s.dir = dir.path.string();
}

// `ld -shared -o out in`: the system linker only (no compiler) turns the object into
// something dlopen() can load.
void link_shared(const fs::path& object, const fs::path& shared) {
  std::string o = object.string(), so = shared.string();
  std::vector<char*> argv = {const_cast<char*>("ld"),
                             const_cast<char*>("-shared"),
                             const_cast<char*>("-z"),
                             const_cast<char*>("noexecstack"),
                             const_cast<char*>("-o"),
                             so.data(),
                             o.data(),
                             nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "ld", nullptr, nullptr, argv.data(), environ) != 0)
    fail(ErrorKind::kBackend, "halide: cannot run the linker 'ld' (binutils) to build {}", so);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorKind::kBackend, "halide: 'ld -shared' failed building {}", so);
}

fs::path unique_temp(const fs::path& dir, const std::string& stem, const char* ext) {
  static std::atomic<int> counter{0};
  return dir / fmt::format("{}.{}.{}.tmp{}", stem, getpid(), counter++, ext);
}

// Builds `final_so` (atomically: other processes may share the cache) from an object file
// that `emit` writes.
void build_shared(const fs::path& dir, const std::string& stem, const fs::path& final_so,
                  const std::function<void(const std::string&)>& emit) {
  fs::path obj = unique_temp(dir, stem, ".o"), so = unique_temp(dir, stem, ".so");
  std::error_code ec;
  try {
    emit(obj.string());
    link_shared(obj, so);
  } catch (...) {
    fs::remove(obj, ec);
    fs::remove(so, ec);
    throw;
  }
  fs::remove(obj, ec);
  fs::rename(so, final_so, ec);
  if (ec) {
    fs::remove(so, ec);
    fail(ErrorKind::kBackend, "halide: cannot write {}", final_so.string());
  }
}

void apply_threads(State& s) {
  if (!s.runtime) return;
  using SetThreads = int (*)(int);
  auto fn = reinterpret_cast<SetThreads>(dlsym(s.runtime, "halide_set_num_threads"));
  if (fn) fn(s.threads);
}

// The runtime's default error handler aborts the process; a kernel that fails must fail
// its call instead (the entry point then returns non-zero and run() throws).
thread_local std::string last_error;
void record_error(void*, const char* message) {
  last_error = message ? message : "";
}

void load_runtime(State& s, const fs::path& dir) {
  if (s.runtime) return;
  const std::string stem =
      "runtime-" + hash_hex(host_target().to_string() + " " + COLLAGE_HALIDE_VERSION);
  fs::path so = dir / (stem + ".so");
  for (int attempt = 0; attempt < 2 && !s.runtime; ++attempt) {
    if (attempt > 0 || !fs::exists(so)) {
      build_shared(dir, stem, so, [](const std::string& obj) {
        Halide::compile_standalone_runtime(obj, host_target());
      });
    }
    // Global: the kernels' undefined halide_* symbols resolve to this one copy.
    s.runtime = dlopen(so.c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
  if (!s.runtime)
    fail(ErrorKind::kBackend, "halide: cannot load runtime {}: {}", so.string(), dlerror());
  using Handler = void (*)(void*, const char*);
  using SetHandler = Handler (*)(Handler);
  auto set_handler = reinterpret_cast<SetHandler>(dlsym(s.runtime, "halide_set_error_handler"));
  if (set_handler) set_handler(record_error);
  apply_threads(s);
}

EntryPoint load_kernel(const fs::path& so, const std::string& name) {
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return nullptr;
  auto fn = reinterpret_cast<EntryPoint>(dlsym(handle, (name + "_argv").c_str()));
  if (!fn) dlclose(handle);
  return fn;
}

}  // namespace

const Halide::Target& host_target() {
  static const Halide::Target t = [] {
    Halide::Target host = Halide::get_host_target();
    // Halide 14 calls a CPU with AVX-512 BF16 and VNNI "sapphirerapids", whose feature set
    // includes AVX512-FP16; AMD's Zen 4 and Zen 5 have the former and not FP16, and LLVM then
    // emits FP16 instructions (`vmovw` for a 16-bit load): a random transformer's kernel
    // died of SIGILL on this EPYC. Ask the CPU itself.
    __builtin_cpu_init();
    if (host.has_feature(Halide::Target::AVX512_SapphireRapids) &&
        !__builtin_cpu_supports("avx512fp16"))
      host = host.without_feature(Halide::Target::AVX512_SapphireRapids);
    return host;
  }();
  return t;
}

EntryPoint get_kernel(const std::string& description, const ModuleBuilder& build) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::string key =
      hash_hex(description + "\n" + host_target().to_string() + "\n" + kCodegenVersion);
  if (auto it = s.kernels.find(key); it != s.kernels.end()) {
    ++s.stats.memory_hits;
    return it->second;
  }
  const fs::path dir = build_dir(s);
  load_runtime(s, dir);
  const std::string name = "collage_hl_" + key;
  const fs::path so = dir / (key + ".so");
  EntryPoint fn = nullptr;
  if (s.persistent && fs::exists(so)) {
    fn = load_kernel(so, name);
    if (fn) ++s.stats.disk_hits;
  }
  if (!fn) {
    const auto start = std::chrono::steady_clock::now();
    // No bounds-query mode: every call passes real buffers of the constrained shapes, and
    // without that code path LLVM has 8-12 % less to compile (a DCN-v2's 22 kernels 2.34 ->
    // 2.17 s, a PatchTST's 49 4.95 -> 4.39; compiles are most of a tune's halide time).
    const Halide::Target target = host_target()
                                      .with_feature(Halide::Target::NoRuntime)
                                      .with_feature(Halide::Target::NoBoundsQuery);
    try {
      Halide::Module module = build(name, target);
      build_shared(dir, key, so, [&](const std::string& obj) {
        module.compile({{Halide::OutputFileType::object, obj}});
      });
    } catch (const Halide::Error& e) {
      fail(ErrorKind::kBackend, "halide: compiling failed: {}", e.what());
    }
    fn = load_kernel(so, name);
    if (!fn) fail(ErrorKind::kBackend, "halide: cannot load {}: {}", so.string(), dlerror());
    if (!s.persistent) {
      std::error_code ec;
      fs::remove(so, ec);  // loaded; the mapping outlives the file
    }
    ++s.stats.compiles;
    s.stats.compile_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  s.kernels[key] = fn;
  return fn;
}

CacheStats cache_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void clear_memory_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.kernels.clear();
}

std::string cache_dir() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.dir;
}

void set_num_threads(int threads) {
  // Called before every kernel run: only a change takes the lock and calls the runtime.
  static std::atomic<int> current{-1};
  threads = std::max(0, threads);
  if (current.load(std::memory_order_relaxed) == threads) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  current.store(threads, std::memory_order_relaxed);
  s.threads = threads;
  apply_threads(s);
}

std::string last_kernel_error() {
  return last_error;
}

std::string target_string() {
  return host_target().to_string();
}

}  // namespace collage::halide_backend
