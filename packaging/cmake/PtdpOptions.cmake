# Tri-state options (AUTO|ON|OFF) and the project's warning flags.

# ptdp_tristate(NAME DOC): declares a cache option NAME that is AUTO, ON or OFF and normalises
# the usual CMake spellings of true and false.
function(ptdp_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" _v)
  if(_v MATCHES "^(ON|TRUE|YES|Y|1)$")
    set(_v ON)
  elseif(_v MATCHES "^(OFF|FALSE|NO|N|0)$")
    set(_v OFF)
  elseif(NOT _v STREQUAL "AUTO")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF; got '${${name}}'")
  endif()
  set(${name} ${_v} PARENT_SCOPE)
endfunction()

ptdp_tristate(PTDP_WITH_CUDA "Build the CUDA engine (kernels, cuBLASLt)")
ptdp_tristate(PTDP_WITH_NCCL "Use NCCL for GPU communication (needs CUDA)")
ptdp_tristate(PTDP_WITH_MPI "Use MPI between ranks")
set(PTDP_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING
    "CUDA architectures (default: sm_90 code plus compute_90 PTX)")

# -Wall -Wextra -Werror on the project's own code, whatever the language.
function(ptdp_project_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
endfunction()

# Sanitizers and fuzzing (DEVELOPERS.md, "Fuzzing and sanitizers").
#   PTDP_SANITIZE=address,undefined  every C/C++ target compiled and linked with those
#                                    -fsanitize= checks (clang or GCC); UBSan findings abort
#                                    (-fno-sanitize-recover), so a test that trips one fails.
#                                    The bindings, docs and benchmarks are not built: the
#                                    bindings load libptdp into interpreters that carry no
#                                    sanitizer runtime.
#   PTDP_FUZZ=ON                     clang only: the libFuzzer targets of fuzz/ (one per parser
#                                    of untrusted input); the parsers' sources (core/CMakeLists.txt,
#                                    PTDP_FUZZ_COVERAGE_SOURCES) and the targets are compiled with
#                                    -fsanitize=fuzzer-no-link for coverage, and PTDP_SANITIZE
#                                    defaults to address,undefined. The rest of the project is
#                                    compiled without it, so the test suite of the same build runs
#                                    at the sanitizers' speed (the coverage hooks on every
#                                    comparison cost the compute code about a fifth more).
set(PTDP_SANITIZE "" CACHE STRING "Sanitizers for every C/C++ target, e.g. address,undefined (empty: none)")
option(PTDP_FUZZ "Build the libFuzzer targets of fuzz/ (needs clang)" OFF)
if(PTDP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "PTDP_FUZZ=ON needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(PTDP_SANITIZE STREQUAL "")
    set(PTDP_SANITIZE "address,undefined" CACHE STRING "Sanitizers for every C/C++ target" FORCE)
  endif()
endif()
if(NOT PTDP_SANITIZE STREQUAL "")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${PTDP_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${PTDP_SANITIZE})
  # -fsanitize=enum (part of undefined) stays on: ptdp.h's enums have `int` as their fixed
  # underlying type under C++ (PTDP_ENUM_INT), so a C caller's out-of-range value is a value of
  # the type and the C API's range checks refuse it; the project's own enums are `enum class`.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # The sanitizers' checks keep clang from vectorising the `omp simd` loops it is asked to.
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-Wno-pass-failed>)
    # C programs load the C++ library: they need UBSan's C++ runtime (vptr checks) too, and
    # the C++ library that runtime uses.
    add_link_options($<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime> $<$<LINK_LANGUAGE:C>:-lstdc++>)
  endif()
endif()

# ccache (PTDP_CCACHE, default ON where ccache is installed and no compiler launcher was given):
# C, C++ and CUDA compiles go through ccache with the cache in this build folder
# (PTDP_CCACHE_DIR = <build>/.ccache, so the build folder stays self-contained) and absolute
# paths below the source folder hashed as relative ones (CCACHE_BASEDIR). A rebuild after a
# clean reuses the objects, and so do the `pip install .` checks of bindings/python: their
# build folder sits beside this one, so the same file compiles to the same command line there.
option(PTDP_CCACHE "Compile through ccache, with the cache in the build folder, where it is installed" ON)
set(PTDP_CCACHE_DIR "")
if(PTDP_CCACHE AND NOT CMAKE_C_COMPILER_LAUNCHER AND NOT CMAKE_CXX_COMPILER_LAUNCHER
   AND NOT DEFINED ENV{CMAKE_CXX_COMPILER_LAUNCHER})
  find_program(PTDP_CCACHE_PROGRAM ccache)
  mark_as_advanced(PTDP_CCACHE_PROGRAM)
  if(PTDP_CCACHE_PROGRAM)
    set(PTDP_CCACHE_DIR "${PROJECT_BINARY_DIR}/.ccache")
    set(_ptdp_launcher ${CMAKE_COMMAND} -E env "CCACHE_DIR=${PTDP_CCACHE_DIR}"
        "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1 ${PTDP_CCACHE_PROGRAM})
    foreach(_lang C CXX CUDA)
      set(CMAKE_${_lang}_COMPILER_LAUNCHER ${_ptdp_launcher})
    endforeach()
  endif()
endif()
