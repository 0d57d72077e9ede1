// What the cudnn backend's kernels share: the process's one cuDNN handle (used under a lock,
// bound at each call to the stream of the calling thread), status checks, and RAII owners of
// cuDNN's descriptors. cuDNN's "legacy" API (still in cuDNN 9, deprecated there) is used: see
// docs/DESIGN.md for why.
#pragma once

// The legacy API is marked deprecated in cuDNN 9 (warnings only with CUDNN_WARN_DEPRECATED).
#include <cudnn.h>

#include <mutex>
#include <string>
#include <vector>

#include "collage/error.h"
#include "devices/cuda/cuda_device.h"

namespace collage::cudnn_backend {

// Error(kBackend) "what: cuDNN's message" unless `status` is CUDNN_STATUS_SUCCESS.
void check(cudnnStatus_t status, const char* what);
// The same at compile time, where a configuration cuDNN does not support (NOT_SUPPORTED,
// BAD_PARAM) is Error(kUnsupported): the search then skips the candidate.
void check_supported(cudnnStatus_t status, const char* what);

// The handle, locked for one kernel's calls: cuDNN handles are not for concurrent use, and
// steps of a concurrent stage may run cuDNN kernels at the same time.
class HandleLock {
 public:
  HandleLock();
  cudnnHandle_t get() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cudnnHandle_t handle_;
};

// cuDNN wants ints; Error(kUnsupported) for a dimension beyond them.
std::vector<int> to_int(const std::vector<int64_t>& dims, const char* what);

class TensorDesc {
 public:
  // A packed float tensor of `dims` (at least 4: callers pad 1-D problems with a unit axis).
  explicit TensorDesc(const std::vector<int>& dims);
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDesc {
 public:
  explicit FilterDesc(const std::vector<int>& dims);  // KCRS..., float, NCHW
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvDesc {
 public:
  // Cross-correlation (ONNX's Conv), float accumulation, `groups`; TF32 only when allowed.
  ConvDesc(const std::vector<int>& pads, const std::vector<int>& strides,
           const std::vector<int>& dilations, int groups);
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolDesc {
 public:
  PoolDesc(cudnnPoolingMode_t mode, const std::vector<int>& window, const std::vector<int>& pads,
           const std::vector<int>& strides);
  ~PoolDesc();
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

class ActivationDesc {
 public:
  explicit ActivationDesc(cudnnActivationMode_t mode);
  ~ActivationDesc();
  ActivationDesc(const ActivationDesc&) = delete;
  ActivationDesc& operator=(const ActivationDesc&) = delete;
  cudnnActivationDescriptor_t get() const { return desc_; }

 private:
  cudnnActivationDescriptor_t desc_ = nullptr;
};

// Device memory a kernel owns (weights, bias, workspace), released with it.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);
  // Allocated and filled from host memory.
  DeviceMemory(const void* host, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// cuDNN's version as "9.19.0" (+tf32 when TF32 is allowed: costs are measured apart).
std::string library_version();

}  // namespace collage::cudnn_backend
