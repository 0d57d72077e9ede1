#include "backends/cuda_gen/nvrtc_compiler.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "backends/cuda_gen/codegen.h"
#include "collage/error.h"
#include "util/kernel_cache_dir.h"

namespace collage::cuda_gen {
namespace {

namespace fs = std::filesystem;

struct State {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const std::string>> cubins;  // key -> cubin
  CompileStats stats;
  std::string dir;
};

State& state() {
  static State s;
  return s;
}

void check_nvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    fail(ErrorKind::kBackend, "cuda-gen: {}: {}", what, nvrtcGetErrorString(r));
}

std::vector<int> supported_archs() {
  int n = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(n);
  if (n) check_nvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

std::string compile(const std::string& source, int arch) {
  std::vector<int> archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end())
    fail(ErrorKind::kBackend, "cuda-gen: NVRTC {} cannot compile for sm_{}", nvrtc_version(), arch);
  nvrtcProgram program = nullptr;
  check_nvrtc(nvrtcCreateProgram(&program, source.c_str(), "collage_gen.cu", 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  // IEEE float math as the reference computes it (no --use_fast_math): results are checked
  // against it with a relative tolerance of 1e-3.
  const std::string gpu = fmt::format("--gpu-architecture=sm_{}", arch);
  const char* options[] = {gpu.c_str(), "--std=c++17"};
  nvrtcResult result = nvrtcCompileProgram(program, 2, options);
  if (result != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    if (size) nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    fail(ErrorKind::kBackend, "cuda-gen: NVRTC failed ({}):\n{}", nvrtcGetErrorString(result), log);
  }
  size_t size = 0;
  std::string cubin;
  try {
    check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
    cubin.resize(size);
    check_nvrtc(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  } catch (...) {
    nvrtcDestroyProgram(&program);
    throw;
  }
  nvrtcDestroyProgram(&program);
  return cubin;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::shared_ptr<const std::string> compile_cubin(const std::string& source, int arch) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::string key = hash_hex(
      fmt::format("{}\nsm_{}\nnvrtc {}\n{}", source, arch, nvrtc_version(), kCodegenVersion));
  if (auto it = s.cubins.find(key); it != s.cubins.end()) {
    ++s.stats.memory_hits;
    return it->second;
  }
  const KernelCacheDir dir = kernel_cache_dir("cuda-gen");
  s.dir = dir.path.string();
  const fs::path file = dir.path / (key + ".cubin");
  std::string cubin;
  // A cubin is an ELF file: anything else (an interrupted write elsewhere) is rebuilt.
  if (dir.persistent && fs::exists(file)) {
    cubin = read_file(file);
    if (cubin.size() > 4 && cubin.compare(0, 4,
                                          "\x7f"
                                          "ELF") == 0)
      ++s.stats.disk_hits;
    else
      cubin.clear();
  }
  if (cubin.empty()) {
    const auto start = std::chrono::steady_clock::now();
    cubin = compile(source, arch);
    ++s.stats.compiles;
    s.stats.compile_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (dir.persistent) {
      write_file_atomically(dir.path / (key + ".cu"), source);
      write_file_atomically(file, cubin);
    }
  }
  auto shared = std::make_shared<const std::string>(std::move(cubin));
  s.cubins[key] = shared;
  return shared;
}

CompileStats compile_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void clear_memory_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cubins.clear();
}

std::string cache_dir() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.dir;
}

}  // namespace collage::cuda_gen
