# Debian packages of the install components (cmake/chorus_install.cmake), built by
# scripts/package with CPack:
#   chorus          tools: chorusrun, chorus-bench, the docs
#   chorus-dev      dev: headers, static libraries, CMake package, chorus.pc, examples
#   python3-chorus  python: chorus.torch for Debian's python3 (when it was built)
# Depends of the programs and the extension come from dpkg-shlibdeps (the libraries they
# load); what the static libraries and the Python package need is listed by hand below.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME chorus)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR chorus)
set(CPACK_PACKAGE_CONTACT "chorus developers <chorus@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # programs, the extension, and (chorus_install.cmake) the libraries
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # name_version_arch.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

set(CPACK_COMPONENTS_ALL tools dev)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME chorus)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
# Descriptions: the first line is the package's summary.
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "distributed training for libtorch C++ programs: launcher
chorusrun starts, watches and stops every rank of a chorus job (and of Horovod-style
programs); chorus-bench times collectives. Documentation in /usr/share/doc/chorus.")

# The static libraries need their dependencies' development files at link time; the
# libtorch layers also libtorch's, of the version they were compiled against.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME chorus-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libssl-dev, zlib1g-dev")
if(CHORUS_WITH_MPI)  # chorus_comm's bare-mpirun bootstrap links libmpi
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libopenmpi-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "chorus (= ${PROJECT_VERSION}-1), cmake, pkg-config")
# libtorch's version, from its package's version file (which sets PACKAGE_VERSION).
function(chorus_torch_version out)
  include(${Torch_DIR}/TorchConfigVersion.cmake)
  set(${out} ${PACKAGE_VERSION} PARENT_SCOPE)
endfunction()
if(CHORUS_WITH_TORCH AND EXISTS ${Torch_DIR}/TorchConfigVersion.cmake)
  chorus_torch_version(torch_version)
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _ ${torch_version})
  math(EXPR torch_next "${CMAKE_MATCH_2} + 1")
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS
         ", libtorch-dev (>= ${torch_version}), libtorch-dev (<< ${CMAKE_MATCH_1}.${torch_next}~)")
endif()
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "distributed training for libtorch C++ programs: development files
Headers, static libraries, the CMake package (find_package(chorus CONFIG)) and
chorus.pc for pkg-config (the libtorch-free layers). The libtorch layers (chorus::torch,
chorus::train) need libtorch-dev.")

if(CHORUS_WITH_PYTHON AND TARGET chorus_python_ops)
  list(APPEND CPACK_COMPONENTS_ALL python)
  find_package(Python3 COMPONENTS Interpreter QUIET)  # the one python/ built for
  set(py ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR})
  math(EXPR py_next "${Python3_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-chorus)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= ${py}), \
python3 (<< ${Python3_VERSION_MAJOR}.${py_next}), python3-torch, chorus (= ${PROJECT_VERSION}-1)")
  set(CPACK_COMPONENT_PYTHON_DESCRIPTION "distributed training for PyTorch programs: chorus.torch
Horovod's PyTorch API over chorus's engine, for Debian's python3 and python3-torch:
replace 'import horovod.torch as hvd' by 'import chorus.torch as hvd' and start the
program with chorusrun.")
endif()

include(CPack)
