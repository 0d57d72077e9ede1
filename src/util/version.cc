#include "collage/version.h"

namespace collage {

const char* version() {
  return COLLAGE_VERSION_STRING;
}

}  // namespace collage
