#include "devices/cuda/cuda_device.h"

#include <fmt/format.h>

#include <cstdlib>

#include "collage/error.h"

namespace collage::cuda {
namespace {

thread_local cudaStream_t stream_override = nullptr;

std::string error_text(cudaError_t status) {
  return fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
}

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  // A sticky error (a kernel fault) would make every later call fail too: say so once.
  fail(ErrorKind::kBackend, "{}: {}", what, error_text(status));
}

CudaDevice& CudaDevice::get() {
  static CudaDevice* device = new CudaDevice();  // never destroyed: kernels may outlive statics
  return *device;
}

void CudaDevice::init() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    reason_ = fmt::format("no CUDA device (cudaGetDeviceCount: {})", error_text(status));
    return;
  }
  if (count == 0) {
    reason_ = "no CUDA device (cudaGetDeviceCount found none)";
    return;
  }
  auto step = [&](cudaError_t s, const char* what) {
    if (s != cudaSuccess && reason_.empty())
      reason_ = fmt::format("CUDA device 0 unusable ({}: {})", what, error_text(s));
    return s == cudaSuccess;
  };
  if (!step(cudaSetDevice(0), "cudaSetDevice")) return;
  if (!step(cudaGetDeviceProperties(&properties_, 0), "cudaGetDeviceProperties")) return;
  if (!step(cudaDriverGetVersion(&driver_version_), "cudaDriverGetVersion")) return;
  compute_capability_ = properties_.major * 10 + properties_.minor;
  if (compute_capability_ < 70) {
    reason_ = fmt::format("CUDA device 0 ({}) is sm_{}: sm_70 or newer is needed", properties_.name,
                          compute_capability_);
    return;
  }
  step(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

bool CudaDevice::available() {
  std::call_once(once_, [this] { init(); });
  return reason_.empty();
}

std::string CudaDevice::unavailable_reason() {
  return available() ? "" : reason_;
}

void CudaDevice::require_available() {
  if (!available()) fail(ErrorKind::kBackend, "{}", reason_);
}

std::string CudaDevice::description() const {
  return fmt::format("{}, sm_{}, driver {}.{}", properties_.name, compute_capability_,
                     driver_version_ / 1000, driver_version_ % 1000 / 10);
}

void* CudaDevice::allocate(size_t bytes) {
  require_available();
  void* memory = nullptr;
  cudaError_t status = cudaMalloc(&memory, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    fail(ErrorKind::kLimit, "cannot allocate {} bytes on {} ({})", bytes, name(),
         error_text(status));
  }
  check(status, "cudaMalloc");
  return memory;
}

void CudaDevice::release(void* memory) noexcept {
  if (memory) cudaFree(memory);
}

void CudaDevice::copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  // From pageable memory the call returns once the source is staged: the caller may reuse it.
  check(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync to the device");
}

void CudaDevice::copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  cudaStream_t s = stream();
  check(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync to the host");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a copy to the host");
}

void CudaDevice::synchronize() {
  require_available();
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

bool CudaDevice::tf32() {
  static const bool allowed = [] {
    const char* v = std::getenv("COLLAGE_CUDA_TF32");
    return v && std::string(v) == "1";
  }();
  return allowed;
}

cudaStream_t CudaDevice::stream() const {
  return stream_override ? stream_override : stream_;
}

StreamOverride::StreamOverride(cudaStream_t stream) : previous_(stream_override) {
  stream_override = stream;
}

StreamOverride::~StreamOverride() {
  stream_override = previous_;
}

}  // namespace collage::cuda
