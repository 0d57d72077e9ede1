// The CUDA device the GPU backends run on (device 0 of what CUDA_VISIBLE_DEVICES shows), as a
// collage::Device: memory, copies, the stream every kernel enqueues on, error checks. Shared
// by the cudnn, cublas, cuda-gen and cuda-graph backend folders (which never include each
// other): this folder is their common ground, like a library they all link.
//
// Nothing here touches CUDA before available() or a first use: a process that never asks
// pays nothing, and a parent that forks workers (the conformance runner) leaves CUDA
// uninitialised for its children (CUDA cannot be used in a child forked after the parent
// initialised it).
//
// Streams: kernels call stream() at every run, never keep it: a cuda-graph region runs its
// kernels once on a capture stream of its own (StreamOverride) to record them.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "collage/device.h"

namespace collage::cuda {

// Throws Error(kBackend) "`what`: cudaErrorName: message" unless `status` is cudaSuccess.
void check(cudaError_t status, const char* what);

class CudaDevice : public Device {
 public:
  static CudaDevice& get();

  // Whether a device can be used here (checked once); why not otherwise, e.g. "no CUDA device
  // (cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected)".
  bool available();
  std::string unavailable_reason();

  std::string name() const override { return "cuda:0"; }
  // "NVIDIA H100 80GB HBM3, sm_90, driver 12.8": what a measurement on it depends on.
  std::string description() const override;
  void* allocate(size_t bytes) override;
  void release(void* memory) noexcept override;
  void copy_to_device(void* device_dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override;
  void synchronize() override;

  // The stream this thread's kernels enqueue on: the device's one stream, or the capture
  // stream a StreamOverride set on this thread.
  cudaStream_t stream() const;
  // Compute capability as major * 10 + minor (90 for sm_90); needs available().
  int compute_capability() const { return compute_capability_; }
  const cudaDeviceProp& properties() const { return properties_; }
  // Whether float32 matrix products may use TF32 tensor cores (10-bit mantissas): only when
  // COLLAGE_CUDA_TF32=1. Off by default: results then match float32 references; the backends
  // that honour it (cudnn, cublas) name it in their version, so the two are costed apart.
  static bool tf32();
  // The significand bits of those products (Backend::float32_significand_bits): 11 with
  // TF32 (10 stored + the implicit one), else float32's 24.
  static int matmul_significand_bits() { return tf32() ? 11 : 24; }

 private:
  CudaDevice() = default;
  void init();
  void require_available();

  std::once_flag once_;
  std::string reason_;  // "" when usable
  cudaDeviceProp properties_{};
  int compute_capability_ = 0;
  int driver_version_ = 0;
  cudaStream_t stream_ = nullptr;
};

// While alive, CudaDevice::stream() on this thread is `stream` (cuda-graph's capture).
class StreamOverride {
 public:
  explicit StreamOverride(cudaStream_t stream);
  ~StreamOverride();
  StreamOverride(const StreamOverride&) = delete;
  StreamOverride& operator=(const StreamOverride&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace collage::cuda
