#pragma once

namespace collage::cli {

// For the commands that run kernels (run, tune, bench, measure-worker): re-executes the
// process once with the settings the libraries read from the environment at load time
// (library_env.cc: short idle-spin limits for the thread pools, huge pages for the large
// blocks glibc's malloc maps, LLVM's OpenMP runtime preloaded), unless the user chose them.
// Returns when nothing was changed (or exec failed). First gives the main thread back the
// CPUs the process started with, where libgomp bound it to one at load (OMP_PROC_BIND and
// the like; library_env.cc).
void set_library_environment(int argc, char** argv);

}  // namespace collage::cli
