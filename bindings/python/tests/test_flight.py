"""The flight recorder and abort from Python: a runtime of its own writes its record, the
analyzer reads it back, abort makes later calls fail fast, and bad directories are errors."""
import json
import os

import numpy as np
import pytest

import ptdp


def test_dump_analyze_abort(tmp_path):
    with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
        t = ptdp.Tensor(np.ones(4, dtype=np.float32))
        g.all_reduce(t, ptdp.GroupKind.WORLD)
        rt.dump_flight_record(tmp_path)
        record = json.load(open(os.path.join(tmp_path, "flight-rank00000.json")))
        assert record["format"] == "ptdp-flight-recorder"
        ops = [e["op"] for e in record["entries"]]
        assert "all_reduce" in ops
        last = [e for e in record["entries"] if e["op"] == "all_reduce"][-1]
        assert last["count"] == 4 and last["state"] == "completed"
        report, culprit = ptdp.flight_analyze(tmp_path)
        assert culprit == -1
        assert "consistent" in report
        rt.abort()
        with pytest.raises(ptdp.Error, match="aborted"):
            g.all_reduce(t, ptdp.GroupKind.WORLD)


def test_bad_directories(tmp_path):
    with pytest.raises(ptdp.FileError, match="is not a directory"):
        ptdp.flight_analyze(tmp_path / "missing")
    with pytest.raises(ptdp.FileError, match="no flight record"):
        ptdp.flight_analyze(tmp_path)


def test_comm_timeout_left_to_the_environment():
    # Without --comm-timeout the runtime options leave the deadline unset (0), so the runtime
    # takes PTDP_COMM_TIMEOUT_S (else 300 s); the flag, when given, wins.
    with ptdp.TrainConfig([]) as c:
        assert c.runtime_options()["comm_timeout_s"] == 0
        assert json.loads(c.to_json())["comm-timeout"] is None
    with ptdp.TrainConfig(["--comm-timeout", "7"]) as c:
        assert c.runtime_options()["comm_timeout_s"] == 7
