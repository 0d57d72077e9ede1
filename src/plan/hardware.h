// What a measurement depends on besides the subgraph and the backend: the CPU and the
// thread budget, the OpenMP runtime where it is not libgomp (util/openmp_runtime.h), and the
// devices (GPU model, driver) when a device backend is involved.
// Costs measured on another machine are never reused.
#pragma once

#include <string>
#include <vector>

namespace collage {

struct Hardware {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  std::string isa;        // the vector extensions that matter: avx2, avx512f, avx512_bf16, ...
  int threads = 0;
  // "libomp" when the OpenMP calls go to LLVM's runtime, "" under libgomp (keys measured
  // before the runtime was named stay valid there).
  std::string openmp;
  // The devices a measurement used ("" for the host alone): their descriptions, "; "-separated.
  std::string devices;
  std::string fingerprint() const;  // one line: model | isa | threads [| openmp] [| devices]
};

// The CPU alone: a host-only measurement's key stays the same whether or not the machine
// has a GPU.
Hardware this_machine(int threads);

class Device;
// `hw` with `devices` named (null entries and repeats skipped): the machine as a
// measurement that runs on them sees it.
Hardware with_devices(Hardware hw, const std::vector<const Device*>& devices);

}  // namespace collage
