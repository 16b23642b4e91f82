#include "chorus/version.h"

namespace chorus {

// Compiled into the library, so a program can compare it with the headers it was built with.
const char* version() { return CHORUS_VERSION_STRING; }

}  // namespace chorus
