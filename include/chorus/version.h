// chorus's version: the one place it is written. The top CMakeLists.txt reads
// CHORUS_VERSION_STRING from here for project(), the CMake package and the Debian packages.
// Semantic versioning: while the major version is 0, a new minor version may change public
// headers incompatibly; a patch version never does (CHANGELOG.md).
#pragma once

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 2
#define CHORUS_VERSION_PATCH 0
#define CHORUS_VERSION_STRING "0.2.0"

namespace chorus {

// The version of the chorus library linked into the program, "MAJOR.MINOR.PATCH". It equals
// CHORUS_VERSION_STRING unless the program was compiled against other headers than the
// library it links. Thread-safe; never fails.
const char* version();

}  // namespace chorus
