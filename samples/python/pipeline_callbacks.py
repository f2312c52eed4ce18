#!/usr/bin/env python3
"""ptdp's pipeline scheduler driving a model written in numpy, through Python callbacks.

The model is a chain of tanh layers y = tanh(x W_c) fitted to a target by least squares; chunk
c of the chain lives on pipeline rank c % p. ptdp runs the 1F1B schedule: it calls forward and
backward of this rank's chunk for each microbatch in schedule order and moves activations and
their gradients between ranks. The numpy code never communicates.

    python3 pipeline_callbacks.py                 # p = 1: the whole chain on one rank
    mpiexec -n 2 python3 pipeline_callbacks.py    # p = 2: two stages
"""
import sys

import numpy as np

import ptdp

WIDTH, BATCH, MICROBATCHES, STEPS, LR = 8, 4, 4, 30, 0.5


class TanhChain(ptdp.Stage):
    """This rank's chunk of the chain: the library calls forward and backward_input."""

    activation_shape = (BATCH, WIDTH)  # what flows between chunks (f32)

    def __init__(self, chunk, chunks, seed=0):
        rng = np.random.default_rng(seed + chunk)
        self.chunk, self.last = chunk, chunk == chunks - 1
        self.w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        self.grad = np.zeros_like(self.w)
        self.saved = {}  # microbatch -> (input, output), kept from forward to backward
        self.losses = []

    @staticmethod
    def data(mb):
        rng = np.random.default_rng(100 + mb)
        x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
        return x, np.sin(x[:, ::-1]).astype(np.float32)  # input and target of microbatch mb

    def forward(self, chunk, mb, x):
        if x is None:  # the first chunk reads the data
            x = self.data(mb)[0]
        y = np.tanh(x @ self.w)
        self.saved[mb] = (x, y)
        if self.last:  # the last chunk ends in the loss and passes nothing on
            self.losses.append(float(np.mean((y - self.data(mb)[1]) ** 2)))
            return None
        return y

    def backward_input(self, chunk, mb, dy):
        x, y = self.saved.pop(mb)
        if self.last:  # start from the gradient of the mean loss over microbatches
            dy = 2 * (y - self.data(mb)[1]) / (y.size * MICROBATCHES)
        dz = dy * (1 - y * y)
        self.grad += x.T @ dz
        return None if self.chunk == 0 else dz @ self.w.T


def main():
    with ptdp.Runtime() as runtime:
        p = runtime.size
        with runtime.groups(pipeline=p) as groups, ptdp.Schedule("1f1b", p, MICROBATCHES) as schedule:
            stage = TanhChain(groups.rank(ptdp.GroupKind.PIPELINE), p)
            for step in range(STEPS):
                stage.grad[:] = 0
                ptdp.pipeline_run(groups, schedule, stage)
                stage.w -= LR * stage.grad  # plain SGD on this rank's chunk
            if stage.last:
                first = np.mean(stage.losses[:MICROBATCHES])
                final = np.mean(stage.losses[-MICROBATCHES:])
                print(f"loss {first:.4f} -> {final:.4f} over {STEPS} steps on {p} pipeline rank(s)")
                return 0 if final < first else 1
            return 0


if __name__ == "__main__":
    sys.exit(main())
