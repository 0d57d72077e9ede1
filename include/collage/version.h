// collage's own version (the CMake project version), for `collage --version`, the Python
// module's __version__ and programs that embed the library.
#pragma once

namespace collage {

// "MAJOR.MINOR.PATCH" of the libcollage_core this program runs with.
const char* version();

}  // namespace collage
