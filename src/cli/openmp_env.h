#pragma once

namespace collage::cli {

// Re-executes the process with a short OpenMP spin count unless the user chose one.
// Returns only when nothing was done (or exec failed).
void bound_openmp_spinning(char** argv);

}  // namespace collage::cli
