// libFuzzer target: ONNX bytes -> load_model_from_bytes (parse, check, shape inference,
// constant folding) -> model_hash -> save/load round trip. See fuzz/README.md.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_entry_points.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Warnings on every input would drown libFuzzer's own output.
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    collage::fuzz::run_model_input(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const collage::Error& e) {
    // A bad model is refused with an Error: expected. kInternal means collage broke its
    // own invariants (e.g. the round trip), which is a bug: crash so libFuzzer keeps it.
    if (e.kind() == collage::ErrorKind::kInternal) __builtin_trap();
  }
  // Anything else thrown escapes and terminates: libFuzzer reports it as a crash.
  return 0;
}
