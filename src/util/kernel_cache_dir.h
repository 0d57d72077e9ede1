// Where code-generating backends (halide, cuda-gen) keep compiled kernels between processes:
// $COLLAGE_CACHE_DIR/<kind>, else $XDG_CACHE_HOME/collage/<kind>, else ~/.cache/collage/<kind>.
// When that cannot be created or written, a private temporary directory (warned once per
// kind) where nothing is meant to persist: the process removes it when it exits. Files are
// named by a hash of everything that determines their contents and written atomically, since
// processes share the directory.
#pragma once

#include <filesystem>
#include <string>

namespace collage {

struct KernelCacheDir {
  std::filesystem::path path;
  bool persistent = true;  // false: a temporary fallback
};

// The directory for `kind` ("halide", "cuda-gen"), created if needed. Throws Error(kBackend)
// when neither it nor a temporary directory can be made.
KernelCacheDir kernel_cache_dir(const std::string& kind);

// 128 bits of two FNV-1a lanes as 32 hex digits: names for cache files.
std::string hash_hex(const std::string& text);

// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
// reader never sees half a file. Throws Error(kBackend) when it cannot.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

}  // namespace collage
