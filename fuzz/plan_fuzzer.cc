// libFuzzer target: [model selector byte][plan JSON] -> Plan::from_json -> the checks and
// compilation of Session(graph, plan) (what `collage run --plan` does), against a few tiny
// zoo models built once. See fuzz/README.md.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_entry_points.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // The hardware/version mismatch warnings would print on every input.
  spdlog::set_level(spdlog::level::off);
  collage::fuzz::plan_models();
  // fuzz/make_corpus.sh asks for the generated seeds this way: they need the models, which
  // only this binary builds identically.
  if (const char* dir = std::getenv("COLLAGE_FUZZ_WRITE_SEEDS")) {
    int i = 0;
    for (const std::string& seed : collage::fuzz::plan_seed_inputs())
      std::ofstream(std::string(dir) + "/generated-plan-" + std::to_string(i++), std::ios::binary)
          << seed;
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    collage::fuzz::run_plan_input(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const collage::Error& e) {
    if (e.kind() == collage::ErrorKind::kInternal) __builtin_trap();
  }
  return 0;
}
