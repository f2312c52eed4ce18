# Finds the toolchains and libraries the engine builds on and decides PTDP_HAVE_{CUDA,NCCL,MPI}.

find_package(OpenMP REQUIRED COMPONENTS CXX)

# Header-only: JSON (checkpoint metadata, logs) and command lines (ptdp-train's flags).
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
# OpenSSL's libcrypto: SHA-256 of checkpoint files.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# OpenBLAS. Prefer Debian's OpenMP build: it runs single-threaded inside our own OpenMP
# parallel regions (batched GEMMs) instead of fighting them with a second thread pool.
set(PTDP_BLAS_LIBRARY "" CACHE FILEPATH "OpenBLAS library to link (empty: search)")
set(PTDP_BLAS_INCLUDE_DIR "" CACHE PATH "Directory holding OpenBLAS's cblas.h (empty: search)")
if(NOT PTDP_BLAS_LIBRARY)
  find_library(_ptdp_openblas NAMES openblas
    PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
          /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread
    NO_DEFAULT_PATH)
  if(NOT _ptdp_openblas)
    find_library(_ptdp_openblas NAMES openblas REQUIRED)
  endif()
  set(PTDP_BLAS_LIBRARY "${_ptdp_openblas}" CACHE FILEPATH "" FORCE)
endif()
if(NOT PTDP_BLAS_INCLUDE_DIR)
  get_filename_component(_ptdp_blas_variant "${PTDP_BLAS_LIBRARY}" DIRECTORY)
  get_filename_component(_ptdp_blas_variant "${_ptdp_blas_variant}" NAME)
  find_path(_ptdp_cblas cblas.h
    PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/${_ptdp_blas_variant} /usr/include/openblas
    NO_DEFAULT_PATH)
  if(NOT _ptdp_cblas)
    find_path(_ptdp_cblas cblas.h REQUIRED)
  endif()
  set(PTDP_BLAS_INCLUDE_DIR "${_ptdp_cblas}" CACHE PATH "" FORCE)
endif()
add_library(ptdp_openblas INTERFACE)
target_link_libraries(ptdp_openblas INTERFACE "${PTDP_BLAS_LIBRARY}")
target_include_directories(ptdp_openblas SYSTEM INTERFACE "${PTDP_BLAS_INCLUDE_DIR}")
get_filename_component(PTDP_BLAS_LIBRARY_DIR "${PTDP_BLAS_LIBRARY}" DIRECTORY)

# MPI
set(PTDP_HAVE_MPI OFF)
if(NOT PTDP_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C CXX)
  if(MPI_C_FOUND AND MPI_CXX_FOUND)
    set(PTDP_HAVE_MPI ON)
  elseif(PTDP_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "PTDP_WITH_MPI=ON but no MPI (C and C++) was found")
  endif()
endif()

# CUDA: the toolkit lives at /usr/local/cuda on our machines.
set(PTDP_HAVE_CUDA OFF)
if(NOT PTDP_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${PTDP_CUDA_ARCHITECTURES})
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no C++20 flag for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PTDP_HAVE_CUDA ON)
  elseif(PTDP_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PTDP_WITH_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

# NCCL ships with the CUDA toolkit on our machines, or as Debian's libnccl-dev elsewhere.
set(PTDP_HAVE_NCCL OFF)
if(PTDP_HAVE_CUDA AND NOT PTDP_WITH_NCCL STREQUAL "OFF")
  find_path(PTDP_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(PTDP_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(PTDP_NCCL_INCLUDE_DIR AND PTDP_NCCL_LIBRARY)
    set(PTDP_HAVE_NCCL ON)
  endif()
endif()
if(PTDP_WITH_NCCL STREQUAL "ON" AND NOT PTDP_HAVE_NCCL)
  message(FATAL_ERROR "PTDP_WITH_NCCL=ON but NCCL (and CUDA) were not found")
endif()
