// A deliberately broken backend plugin: each backend takes Relu and its kernel fails one
// way (segfault, abort, hang, throw) when run. `collage tune` must survive all of them.
// `broken-region` is graph-level: lone Relus work, but a merged region (which only the
// graph-level search builds) segfaults. `broken-compile` and `broken-refuse` fail in
// compile() (see ThrowingCompileBackend).
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>

#include "collage/backend.h"

namespace {

enum class Failure { kSegv, kAbort, kHang, kThrow };

class BrokenKernel : public collage::Kernel {
 public:
  explicit BrokenKernel(Failure f) : failure_(f) {}
  void run(std::span<const collage::Tensor>, std::span<const collage::Tensor>) override {
    switch (failure_) {
      case Failure::kSegv:
        std::raise(SIGSEGV);
        break;
      case Failure::kAbort:
        std::abort();
      case Failure::kHang:
        while (true) pause();
      case Failure::kThrow:
        throw std::runtime_error("broken-throw kernel refuses to run");
    }
  }

 private:
  Failure failure_;
};

// Every backend here takes Relu, under its own name.
class ReluBackend : public collage::Backend {
 public:
  explicit ReluBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "1.0"; }
  std::vector<collage::PatternEntry> patterns() const override {
    return {{"relu", collage::op("Relu"), {}}};
  }

 private:
  std::string name_;
};

class BrokenBackend : public ReluBackend {
 public:
  BrokenBackend(std::string name, Failure f) : ReluBackend(std::move(name)), failure_(f) {}
  std::unique_ptr<collage::Kernel> compile(const collage::Graph&,
                                           const collage::CompileOptions&) override {
    return std::make_unique<BrokenKernel>(failure_);
  }

 private:
  Failure failure_;
};

// Relu done right, so that single-node candidates pass the check against reference.
class ReluKernel : public collage::Kernel {
 public:
  void run(std::span<const collage::Tensor> in, std::span<const collage::Tensor> out) override {
    const float* x = in[0].data<float>();
    float* y = const_cast<float*>(out[0].data<float>());
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = x[i] > 0 ? x[i] : 0;
  }
};

class BrokenRegionBackend : public ReluBackend {
 public:
  BrokenRegionBackend() : ReluBackend("broken-region") {}
  collage::BackendKind kind() const override { return collage::BackendKind::kGraphLevel; }
  std::unique_ptr<collage::Kernel> compile(const collage::Graph& g,
                                           const collage::CompileOptions&) override {
    if (g.num_nodes() == 1) return std::make_unique<ReluKernel>();
    return std::make_unique<BrokenKernel>(Failure::kSegv);
  }
};

// Takes Relu, and its compile() throws `kind`. `broken-compile` breaks (kInternal, not an
// honest refusal): `collage run --backend broken-compile --strict` and the conformance runner
// must fail instead of quietly running the fallback's Relu. `broken-refuse` refuses every
// Relu honestly (kUnsupported): a run on it is a run on the fallback, which the conformance
// ratchet must not count as the backend passing.
class ThrowingCompileBackend : public ReluBackend {
 public:
  ThrowingCompileBackend(std::string name, collage::ErrorKind kind)
      : ReluBackend(std::move(name)), kind_(kind) {}
  std::unique_ptr<collage::Kernel> compile(const collage::Graph&,
                                           const collage::CompileOptions&) override {
    collage::fail(kind_, "{}: compile() throws {}", name(), collage::error_kind_name(kind_));
  }

 private:
  collage::ErrorKind kind_;
};

}  // namespace

extern "C" void collage_register_backends(collage::BackendRegistry* registry) {
  if (registry->abi_version() != collage::BackendRegistry::kAbiVersion) return;
  registry->add(std::make_shared<BrokenBackend>("broken-segv", Failure::kSegv));
  registry->add(std::make_shared<BrokenBackend>("broken-abort", Failure::kAbort));
  registry->add(std::make_shared<BrokenBackend>("broken-hang", Failure::kHang));
  registry->add(std::make_shared<BrokenBackend>("broken-throw", Failure::kThrow));
  registry->add(std::make_shared<BrokenRegionBackend>());
  registry->add(
      std::make_shared<ThrowingCompileBackend>("broken-compile", collage::ErrorKind::kInternal));
  registry->add(
      std::make_shared<ThrowingCompileBackend>("broken-refuse", collage::ErrorKind::kUnsupported));
}
