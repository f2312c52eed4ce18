#!/usr/bin/env python3
"""Trains a tiny GPT with ptdp from Python, taking ptdp-train's (Megatron-LM's) flags.

    python3 train_gpt.py                                  # one process, defaults below
    mpiexec -n 4 python3 train_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
"""
import math
import sys

import ptdp

try:  # Hand over mpi4py's communicator when mpi4py is there; ptdp works on a duplicate of it.
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
except ImportError:
    comm = None

DEFAULTS = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 "
            "--global-batch-size 8 --train-iters 20 --lr 3e-3 --mock-data --log-interval 5").split()


def main(argv):
    # The library parses the flags, so Python accepts exactly what ptdp-train accepts.
    config = ptdp.TrainConfig(DEFAULTS + argv)
    settings = config.settings()
    if settings["help"]:
        print(ptdp.TrainConfig.help("train_gpt.py"))
        return 0
    layout = config.parallel_options()
    with ptdp.Runtime(comm, config.runtime_options()) as runtime, \
            runtime.groups(options=layout) as groups:
        rank = runtime.rank
        sizes = (groups.tensor_size, groups.pipeline_size, groups.size(ptdp.GroupKind.DATA))
        b, gb = settings["micro_batch_size"], settings["global_batch_size"]
        d = groups.size(ptdp.GroupKind.DATA)
        m = gb // (b * d)                      # microbatches per replica and iteration
        replica = groups.rank(ptdp.GroupKind.DATA)
        kind = settings["pipeline_schedule"]   # 1F1B unless --pipeline-schedule says otherwise
        with ptdp.Model(groups, config.gpt_options()) as model, \
                ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \
                ptdp.Schedule(kind, groups.pipeline_size, m, groups.virtual_size) as schedule, \
                ptdp.GPTData(config.data_options()) as data:
            first = last = None
            for it in range(settings["train_iters"]):
                # Each data-parallel replica reads its own share of the global batch.
                tokens, labels = data.batch(it * gb + replica * m * b, m * b)
                r = ptdp.train_iteration(model, optimizer, schedule, tokens, labels, b, it)
                first = r.loss if first is None else first
                last = r.loss
                if rank == 0 and (it + 1) % settings["log_interval"] == 0:
                    print(f" iteration {it + 1:6d}/{settings['train_iters']:6d} | lm loss: {r.loss:.6E} | "
                          f"grad norm: {r.grad_norm:.3f} | learning rate: {r.learning_rate:.3E}", flush=True)
    if rank == 0:
        print(f"(t, p, d) = {sizes}: loss {first:.4f} -> {last:.4f}")
    return 0 if math.isfinite(last) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
