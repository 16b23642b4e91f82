# Build options shared by every layer: warnings, sanitizers, ccache, CPU flags.
option(CHORUS_WERROR "Treat warnings as errors" OFF)
set(CHORUS_SANITIZE "" CACHE STRING
    "Sanitizer build: address, undefined, thread, a comma list (address,undefined), or empty")
option(CHORUS_NATIVE "Tune reductions for the build machine (-march=native)" OFF)

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

add_compile_options(-Wall -Wextra)
if(CHORUS_WERROR)
  add_compile_options(-Werror)
endif()
if(CHORUS_NATIVE)
  add_compile_options(-march=native)
endif()

# Sanitizers, one or several ("address,undefined"). UBSan stops at the first report, so a
# test that trips it fails instead of printing and passing.
string(REPLACE "," ";" chorus_sanitizers "${CHORUS_SANITIZE}")
foreach(san IN LISTS chorus_sanitizers)
  if(NOT san MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "CHORUS_SANITIZE: address, undefined, thread, a comma list, or empty")
  endif()
endforeach()
if("thread" IN_LIST chorus_sanitizers AND "address" IN_LIST chorus_sanitizers)
  message(FATAL_ERROR "CHORUS_SANITIZE: thread and address cannot be combined")
endif()
if(chorus_sanitizers)
  add_compile_options(-fsanitize=${CHORUS_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${CHORUS_SANITIZE})
endif()
if("undefined" IN_LIST chorus_sanitizers)
  add_compile_options(-fno-sanitize-recover=undefined)
endif()

# Fuzzing (fuzz/, docs/fuzzing.md): libFuzzer targets, built with clang. Every library is
# instrumented for coverage and checked by ASan and UBSan; only the fuzz targets link
# libFuzzer's main.
option(CHORUS_FUZZ "Build the libFuzzer targets in fuzz/ (clang; no libtorch needed)" OFF)
if(CHORUS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "CHORUS_FUZZ needs clang: configure with CC=clang CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# chorus_test(name LABELS l1 [l2] SOURCES s.cc... LIBS lib... [TIMEOUT s] [RESOURCE_LOCK r])
# One gtest binary registered as one ctest test; the timeout guards against hangs. Tests
# holding the same RESOURCE_LOCK never run at once: "dev_shm" for those that assert nothing
# new appears in /dev/shm and those that start OpenMPI (whose segments live there).
function(chorus_test name)
  cmake_parse_arguments(T "" "TIMEOUT;RESOURCE_LOCK" "LABELS;SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if(T_RESOURCE_LOCK)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
endfunction()
