"""Under mpiexec -n 4, with an mpi4py communicator handed in: training at (t, p, d) = (2, 2, 1)
and (2, 1, 2) gives the losses of the one-rank run to 1e-5. Skipped without 4 ranks."""
import numpy as np
import pytest

import ptdp

MPI = pytest.importorskip("mpi4py.MPI")
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() != 4, reason="needs mpiexec -n 4")

FLAGS = ("--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
         "--micro-batch-size 2 --global-batch-size 8 --lr 1e-2 --mock-data --seed 11")
ITERATIONS = 4


def run(comm, t, p):
    """Losses of ITERATIONS iterations on ``comm`` with tensor size t, pipeline size p."""
    with ptdp.TrainConfig(FLAGS) as config, ptdp.Runtime(comm, comm_timeout_s=60) as rt, \
            rt.groups(tensor=t, pipeline=p) as groups:
        settings = config.settings()
        b, gb = settings["micro_batch_size"], settings["global_batch_size"]
        d = groups.size(ptdp.GroupKind.DATA)
        m = gb // (b * d)
        replica = groups.rank(ptdp.GroupKind.DATA)
        with ptdp.Model(groups, config.gpt_options()) as model, \
                ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \
                ptdp.Schedule("1f1b", p, m) as schedule, ptdp.GPTData(config.data_options()) as data:
            losses = []
            for it in range(ITERATIONS):
                # Replica r of d takes samples r*m*b ... of the global batch.
                tokens, labels = data.batch(it * gb + replica * m * b, m * b)
                losses.append(ptdp.train_iteration(model, optimizer, schedule, tokens, labels, b, it).loss)
    return np.array(losses)


@pytest.fixture(scope="module")
def serial():
    return run(MPI.COMM_SELF, 1, 1)


@pytest.mark.parametrize("t,p", [(2, 2), (2, 1)])
def test_layout_matches_the_serial_run(serial, t, p):
    losses = run(MPI.COMM_WORLD, t, p)
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    np.testing.assert_allclose(losses, serial, rtol=0, atol=1e-5)


def test_runtime_sees_the_mpi4py_communicator():
    comm = MPI.COMM_WORLD.Split(MPI.COMM_WORLD.Get_rank() % 2, 0)
    with ptdp.Runtime(comm) as rt:
        assert (rt.rank, rt.size) == (comm.Get_rank(), 2)
        with rt.groups() as groups:
            x = ptdp.Tensor(np.full(3, MPI.COMM_WORLD.Get_rank(), dtype=np.float32))
            groups.all_reduce(x)
            assert np.all(x.numpy() == (0 + 2 if MPI.COMM_WORLD.Get_rank() % 2 == 0 else 1 + 3))
    comm.Free()
