"""Shared fixtures: one runtime for the session (MPI is initialised once per process)."""
import pytest

import ptdp


@pytest.fixture(scope="session")
def runtime():
    rt = ptdp.Runtime(comm_timeout_s=120)
    yield rt
    rt.close()


@pytest.fixture()
def groups(runtime):
    with runtime.groups() as g:
        yield g
