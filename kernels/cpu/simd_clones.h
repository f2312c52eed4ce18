// Function multi-versioning for the CPU kernels' hot loops. The library is built for baseline
// x86-64 (SSE2); a function marked PTDP_CPU_CLONES is also compiled for AVX2 and AVX-512 and the
// loader picks the best copy the machine runs. The files that use it are built with
// -ffp-contract=off (kernels/CMakeLists.txt), so every copy computes the same bits: the wider
// copies are faster, never different.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define PTDP_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PTDP_CPU_CLONES
#endif

// The same for a function template. GCC clones templates too; clang (14) refuses target_clones
// on a template, so a clang build (the sanitizer build) compiles those for the baseline only:
// slower there, the same bits.
#if defined(__clang__)
#define PTDP_CPU_CLONES_TEMPLATE
#else
#define PTDP_CPU_CLONES_TEMPLATE PTDP_CPU_CLONES
#endif
