// NCCL communicators for GPU tensors. This folder is the one place in core/ that touches a
// device runtime (NCCL needs CUDA streams and events); it is compiled into its own library
// when NCCL is found, and this header names no CUDA or NCCL type, so the rest of the core
// stays free of device headers.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.h"

namespace ptdp {

/// Creates the NCCL communicator of `bootstrap`'s group on GPU `device` (collective over the
/// group): rank 0 draws the unique id and broadcasts it over `bootstrap` under its deadline, so
/// a missing rank is a timeout rather than a hang. Work runs on the communicator's own stream,
/// ordered after the device's default (compute) stream by an event; each Work completes on an
/// event, and a wait past the deadline aborts the NCCL communicator (which frees the stuck
/// kernels) and throws Error(Timeout). `bootstrap` must outlive the result; it also carries the
/// consistency checks when settings.verify is set.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     CommSettings settings);

/// NCCL's version as "2.21.5"; "" when the library cannot be queried.
std::string nccl_version();

}  // namespace ptdp
