"""Lifetimes of the handles as Python users expect them: leaving a runtime's and its groups' `with`
statement closes what is still open on them, children before parents; children keep their
parents alive; closing works in any order; the garbage collector releases what it may and never
a collective handle. Run on one process and under mpiexec -n 2 (python_pytest_mpi_lifetime),
where the groups split the model over both ranks and every rank must close the same handles in
the same order."""
import gc
import itertools

import numpy as np
import pytest

import ptdp

TINY = dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=8, vocab_size=64)


@pytest.fixture()
def destroyed(monkeypatch):
    """The classes whose destroy calls are recorded (in order, by class name), calling the real one."""
    calls = []
    for cls in (ptdp.Runtime, ptdp.Groups, ptdp.Model, ptdp.Optimizer, ptdp.Layer, ptdp.Work, ptdp.Trainer):
        real = cls._destroy

        def record(ptr, real=real, name=cls.__name__):
            calls.append(name)
            return real(ptr)
        monkeypatch.setattr(cls, "_destroy", staticmethod(record))
    return calls


def step(model, optimizer):
    tokens = np.arange(2 * 8, dtype=np.int32).reshape(2, 8) % 64
    with ptdp.Schedule("1f1b", 1, 1) as schedule:
        return ptdp.train_iteration(model, optimizer, schedule, tokens, (tokens + 1) % 64, 2, 0).loss


def test_the_issues_with_statement_closes_the_model_and_optimizer_left_open(destroyed):
    with ptdp.Runtime() as rt, rt.groups(tensor=rt.size) as g:
        model = ptdp.Model(g, **TINY)
        optimizer = ptdp.Optimizer(model, optimizer="adam", lr=1e-3)
        assert np.isfinite(step(model, optimizer))
    assert destroyed == ["Optimizer", "Model", "Groups", "Runtime"]
    assert model.closed and optimizer.closed and g.closed and rt.closed
    with pytest.raises(ValueError, match=r"Model is closed \(closed with its Groups\)"):
        model.zero_grad()
    with pytest.raises(ValueError, match=r"Optimizer is closed \(closed with its Model\)"):
        optimizer.step(1)
    optimizer.close()  # closing again does nothing
    model.close()


def test_children_close_newest_first_and_before_their_parents(destroyed):
    with ptdp.Runtime() as rt:
        first = rt.groups()
        a = ptdp.Model(first, **TINY)
        layer = ptdp.column_parallel_linear(first, 4, 4)
        optimizer = ptdp.Optimizer(a, optimizer="sgd")
        work = first.barrier(nonblocking=True)
        second = rt.groups()
        b = ptdp.Model(second, **TINY)
    assert destroyed == ["Model", "Groups", "Work", "Layer", "Optimizer", "Model", "Groups", "Runtime"]
    assert all(h.closed for h in (first, a, layer, optimizer, work, second, b))


def test_closing_in_any_order():
    for order in itertools.permutations(range(4)):
        rt = ptdp.Runtime(use_mpi=0)
        g = rt.groups()
        model = ptdp.Model(g, **TINY)
        optimizer = ptdp.Optimizer(model)
        handles = (rt, g, model, optimizer)
        for i in order:
            handles[i].close()
            assert handles[i].closed
            # A parent's close closes its descendants; the others stay usable.
            assert all(h.closed for h in handles[i:]), order
            if not optimizer.closed:
                assert np.isfinite(step(model, optimizer))
        assert all(h.closed for h in handles)


def test_a_child_keeps_its_parents_alive():
    with ptdp.Runtime(use_mpi=0) as rt:
        def make_model():
            return ptdp.Model(rt.groups(), **TINY)  # nothing but the model refers to the groups
        model = make_model()
        gc.collect()
        assert model.groups.runtime is rt and not model.groups.closed
        assert np.isfinite(model.forward(np.zeros((1, 8), dtype=np.int32), np.zeros((1, 8), dtype=np.int32)))
    assert model.closed and model.groups.closed


def test_the_garbage_collector_releases_children_children_first(destroyed):
    with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
        model = ptdp.Model(g, **TINY)
        optimizer = ptdp.Optimizer(model)
        del optimizer
        assert destroyed == ["Optimizer"]  # released at once: nothing refers to it
        # A model and its optimizer in a reference cycle: collected together, in any order of
        # finalisers, the optimizer is destroyed first.
        cycle = {"model": model, "optimizer": ptdp.Optimizer(model)}
        cycle["cycle"] = cycle
        del model, cycle
        gc.collect()
        assert destroyed == ["Optimizer", "Optimizer", "Model"]
    assert destroyed[3:] == ["Groups", "Runtime"]


def test_the_garbage_collector_leaves_collective_handles_to_their_parents(destroyed):
    rt = ptdp.Runtime(use_mpi=0)
    with pytest.warns(ResourceWarning, match="unclosed Groups: closing its Runtime releases it"):
        rt.groups()
        gc.collect()
    assert destroyed == []
    rt.close()  # the groups' record stays with the runtime, which destroys them first
    assert destroyed == ["Groups", "Runtime"]


def test_a_child_that_fails_to_close_leaves_its_parent_open(monkeypatch):
    def refuse(ptr):
        raise ptdp.InvalidStateError("model refuses")
    with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
        model = ptdp.Model(g, **TINY)
        real, model._resource.destroy = model._resource.destroy, refuse
        with pytest.raises(ptdp.InvalidStateError, match="model refuses"):
            g.close()
        assert not g.closed and not model.closed
        model._resource.destroy = real
    assert model.closed and g.closed


def test_work_reported_failed_is_released_all_the_same(monkeypatch):
    """ptdp_work_destroy releases the handle even when it reports the operation's failure."""
    real = ptdp.Work._destroy

    def fail_after_release(ptr):
        real(ptr)
        raise ptdp.CommunicationError("the operation failed")
    monkeypatch.setattr(ptdp.Work, "_destroy", staticmethod(fail_after_release))
    with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
        work = g.barrier(nonblocking=True)
        with pytest.raises(ptdp.CommunicationError):
            work.close()
        assert work.closed
        g.barrier(nonblocking=True)
    # The groups closed: neither work was left with them.


def test_every_rank_closes_the_same_handles_in_the_same_order(destroyed):
    MPI = pytest.importorskip("mpi4py.MPI")
    with ptdp.Runtime() as rt:
        groups = [rt.groups(tensor=rt.size), rt.groups(pipeline=rt.size), rt.groups()]
        models = [ptdp.Model(g, **TINY) for g in groups]
        rt.groups().close()
    assert destroyed == ["Groups"] + ["Model", "Groups"] * 3 + ["Runtime"]
    assert MPI.COMM_WORLD.allgather(destroyed) == [destroyed] * MPI.COMM_WORLD.Get_size()
    assert all(m.closed for m in models)
