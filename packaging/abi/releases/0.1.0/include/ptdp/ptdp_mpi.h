/**
 * @file ptdp_mpi.h
 * @brief Handing an MPI communicator (`MPI_Comm`) to ptdp. Include after or instead of
 *        ptdp.h in programs that use MPI themselves; needs `mpi.h`.
 */
#ifndef PTDP_PTDP_MPI_H
#define PTDP_PTDP_MPI_H

#include <mpi.h>

#include "ptdp/ptdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Creates a runtime over a duplicate of @p comm; MPI must be initialised by the caller,
 *        and ptdp never finalises it.
 * @param options NULL for the defaults.
 * @param comm The caller's communicator; ptdp's traffic goes over its own duplicate.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p out, bad options, or `MPI_COMM_NULL`.
 * @retval PTDP_ERR_INVALID_STATE MPI is not initialised.
 * @retval PTDP_ERR_COMMUNICATION MPI failed to duplicate the communicator.
 * @par Thread safety
 * Collective over @p comm.
 */
PTDP_API ptdp_status ptdp_runtime_create_from_mpi(const ptdp_runtime_options* options, MPI_Comm comm,
                                                  ptdp_runtime* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PTDP_PTDP_MPI_H */
