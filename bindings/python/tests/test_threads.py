"""The CPU engine's OpenMP threads from Python: cpu_threads sets them, the runtime reads them
back, and a negative count is an error naming the field."""
import os

import pytest

import ptdp


def test_cpu_threads_explicit_default_and_refused():
    for n in (1, 3):
        with ptdp.Runtime(use_mpi=0, cpu_threads=n) as rt:
            assert rt.cpu_threads == n
    with ptdp.Runtime(use_mpi=0) as rt:
        env = os.environ.get("OMP_NUM_THREADS")
        want = int(env) if env else len(os.sched_getaffinity(0))
        assert rt.cpu_threads == want
    with pytest.raises(ptdp.Error, match=r"options->cpu_threads = -1 is negative"):
        ptdp.Runtime(use_mpi=0, cpu_threads=-1)
