"""Schedules as data: actions read as numpy records, custom schedules, check, simulate, draw."""
import numpy as np
import pytest

import ptdp


def test_actions_of_1f1b():
    with ptdp.Schedule("1f1b", 2, 4) as s:
        assert s.info == (ptdp.ScheduleKind["1F1B"], 2, 4, 1)
        acts = s.actions(1)
        assert acts.dtype == ptdp.ACTION_DTYPE
        computes = acts[np.isin(acts["kind"], [ptdp.ActionKind.FORWARD, ptdp.ActionKind.BACKWARD])]
        assert len(computes) == 8  # one forward and one backward per microbatch
        assert acts["kind"][0] == ptdp.ActionKind.RECV_ACTIVATION and acts["peer"][0] == 0
        assert set(acts["chunk"]) == {1}


def test_custom_schedule_round_trip_and_check():
    with ptdp.Schedule("gpipe", 2, 2) as s:
        lists = [s.actions(r) for r in range(2)]
    with ptdp.Schedule.custom(lists, m=2, kind_label="gpipe") as c:
        assert c.check() == (True, "")
        assert all(np.array_equal(c.actions(r), lists[r]) for r in range(2))
    broken = [lists[0][1:], lists[1]]  # rank 0 loses its first forward
    with ptdp.Schedule.custom(broken, m=2) as c:
        ok, message = c.check()
        assert not ok and message


def test_simulate_and_svg(tmp_path):
    with ptdp.Schedule("1f1b", 4, 8) as s:
        makespan, bubble, peak = s.simulate({"forward": 1, "backward": 2})
        assert bubble == pytest.approx(3 / 8) and list(peak) == [4, 3, 2, 1]
        s.write_svg(tmp_path / "s.svg")
        assert (tmp_path / "s.svg").read_text().lstrip().startswith("<")


def test_bad_schedule_arguments_raise_with_the_library_message():
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_schedule_create"):
        ptdp.Schedule("interleaved_1f1b", 2, 3, 2)
    with pytest.raises(ptdp.InvalidArgumentError, match="kind = 'no-such-kind' is not a ptdp.ScheduleKind; expected "
                                                        "one of 'gpipe', '1f1b', 'interleaved_1f1b', 'zb_h1'"):
        ptdp.Schedule("no-such-kind", 2, 2)
