// What a measurement depends on besides the subgraph and the backend: the CPU and the
// thread budget. Costs measured on another machine are never reused.
#pragma once

#include <string>

namespace collage {

struct Hardware {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  std::string isa;        // the vector extensions that matter: avx2, avx512f, avx512_bf16, ...
  int threads = 0;
  std::string fingerprint() const;  // one line: model | isa | threads
};

Hardware this_machine(int threads);

}  // namespace collage
