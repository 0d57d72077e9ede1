// How much memory this process holds and the machine has: for caches that must give memory
// back before the machine runs out (the tuner's compiled kernels, search/tuner.cc).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <fstream>

namespace collage {

// This process's resident set in bytes (/proc/self/statm); 0 where that can't be read.
inline size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total_pages = 0, resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// The machine's physical memory in bytes; 0 where unknown.
inline size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

}  // namespace collage
