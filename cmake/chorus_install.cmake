# Installing chorus and consuming it from another project, in one place: install rules, the
# CMake package (find_package(chorus CONFIG)), chorus.pc for pkg-config, and the Debian
# packages CPack builds (scripts/package). The layers' own CMakeLists.txt know nothing of it.
# Included from the top CMakeLists.txt after every target exists.
#
# Layout under the prefix P (cmake --install build --prefix P):
#   include/chorus/**                  public headers
#   lib/libchorus_*.a                  the libraries (static, position independent)
#   lib/cmake/chorus/                  chorusConfig.cmake, its version file, the targets
#   lib/pkgconfig/chorus.pc            the libtorch-free layers
#   bin/chorusrun, bin/chorus-bench    the launcher, the collective benchmark
#   bin/chorus-plan, share/chorus/plan the scaling planner (Python; tools/plan)
#   lib/python3/dist-packages/chorus/  chorus.torch (CHORUS_INSTALL_PYTHONDIR)
#   share/doc/chorus/                  README, CHANGELOG, docs/, examples/ (sources)
# Components: tools (programs and docs), dev (headers, libraries, CMake and pkg-config
# files, examples), python (the Python package) — one Debian package each.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CHORUS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
# Debian's /usr/bin/python3 searches /usr/lib/python3/dist-packages; under another prefix,
# add P/lib/python3/dist-packages to PYTHONPATH.
set(CHORUS_INSTALL_PYTHONDIR lib/python3/dist-packages CACHE STRING
    "Where the Python package chorus goes, relative to the install prefix")

# Libraries by export set: the libtorch-free ones always, the torch ones when built. Each is
# exported under its layer's name: chorus_comm -> chorus::comm.
set(CHORUS_CORE_LIBRARIES chorus_util chorus_rendezvous chorus_transport chorus_comm chorus_engine
                          chorus_report chorus_train_io chorus_checkpoint chorus_ps chorus_coordinator)
set(CHORUS_TORCH_LIBRARIES chorus_torch chorus_data chorus_train)  # when libtorch was found
if(NOT CHORUS_WITH_TORCH)
  set(CHORUS_TORCH_LIBRARIES "")
endif()
foreach(lib IN LISTS CHORUS_CORE_LIBRARIES CHORUS_TORCH_LIBRARIES)
  string(REGEX REPLACE "^chorus_" "" name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${name})  # an error if one is missing
endforeach()

install(TARGETS ${CHORUS_CORE_LIBRARIES} EXPORT chorusTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CHORUS_INSTALL_CMAKEDIR}
        COMPONENT dev)
if(CHORUS_TORCH_LIBRARIES)
  install(TARGETS ${CHORUS_TORCH_LIBRARIES} EXPORT chorusTorchTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
  install(EXPORT chorusTorchTargets NAMESPACE chorus:: DESTINATION ${CHORUS_INSTALL_CMAKEDIR}
          COMPONENT dev)
endif()
# Static libraries keep their debug information unless the install strips (--strip, and
# CPack for the Debian packages): install(TARGETS) strips programs only.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    set(dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
    file(GLOB libs \"\${dir}/libchorus_*.a\")
    foreach(lib IN LISTS libs)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug \"\${lib}\"
                      COMMAND_ERROR_IS_FATAL ANY)
    endforeach()
  endif()" COMPONENT dev)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/chorus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev)

# The CMake package.
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/chorusConfig.cmake
                              INSTALL_DESTINATION ${CHORUS_INSTALL_CMAKEDIR})
# 0.x: a new minor version may change the public headers (include/chorus/version.h).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chorusConfig.cmake
              ${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
        DESTINATION ${CHORUS_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: relocatable (the prefix is found from the .pc file's own place), so an
# unpacked package works wherever it lies.
file(RELATIVE_PATH CHORUS_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${PROJECT_SOURCE_DIR}/cmake/chorus.pc.in ${PROJECT_BINARY_DIR}/chorus.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/chorus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# Programs.
foreach(program chorusrun chorus-board chorus-bench chorus-plan)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  endif()
endforeach()

# The Python package: the extension (installed as a target, so its build-tree RPATH goes) and
# the Python files from the source tree.
if(CHORUS_WITH_PYTHON AND TARGET chorus_python_ops)
  install(TARGETS chorus_python_ops LIBRARY DESTINATION ${CHORUS_INSTALL_PYTHONDIR}/chorus/torch
          COMPONENT python)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/chorus DESTINATION ${CHORUS_INSTALL_PYTHONDIR}
          COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endif()

# Documentation, and the examples as sources to read and copy.
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT tools)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        COMPONENT tools)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        COMPONENT dev)

include(${PROJECT_SOURCE_DIR}/cmake/chorus_cpack.cmake)
