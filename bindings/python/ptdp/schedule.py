"""Pipeline schedules as data: generated or custom, inspected, checked, simulated and drawn."""

import numpy as np

from ._lib import Handle, _raw, enum_member, make_enum, make_struct

ScheduleKind = make_enum("ScheduleKind", "ptdp_schedule_kind", "PTDP_SCHEDULE_",
                         "Schedules (ptdp_schedule_kind): GPIPE, 1F1B (``ScheduleKind['1F1B']``), INTERLEAVED_1F1B, "
                         "ZB_H1, FORWARD_ONLY, ZB_V, DUALPIPE_V, INTERLEAVED_ZB; named as ``--pipeline-schedule`` "
                         "names them too (\"1f1b\", \"zb-h1\", \"dualpipev\", ...).")
ActionKind = make_enum("ActionKind", "ptdp_action_kind", "PTDP_ACTION_", "What an action does (ptdp_action_kind).")

# One ptdp_action per row, read and written in place by the library.
ACTION_DTYPE = np.dtype([("kind", "<i4"), ("microbatch", "<i4"), ("chunk", "<i4"), ("peer", "<i4")])


def _costs(costs):
    return None if costs is None else make_struct("ptdp_schedule_costs", costs)


class Schedule(Handle):
    """A schedule (``ptdp_schedule``) of ``kind`` for p pipeline ranks, m microbatches and v
    chunks per rank. Kinds are ``ScheduleKind.GPIPE``, ``ScheduleKind['1F1B']`` (1F1B is not a
    Python identifier), ``ScheduleKind.INTERLEAVED_1F1B`` and ``ScheduleKind.ZB_H1``, or their
    names as strings ("1f1b", "gpipe", ...).

    ``actions(rank)`` returns the rank's list as a numpy structured array with fields kind,
    microbatch, chunk and peer (:data:`ACTION_DTYPE`).
    """

    _destroy = staticmethod(_raw.ptdp_schedule_destroy)

    def __init__(self, kind, p, m, v=1):
        super().__init__(_raw.ptdp_schedule_create(schedule_kind(kind), int(p), int(m), int(v)))

    @classmethod
    def custom(cls, actions_per_rank, m, v=1, kind_label="1F1B"):
        """A schedule from one action list per pipeline rank (arrays of ACTION_DTYPE, or sequences
        of (kind, microbatch, chunk, peer) tuples). Check it with :meth:`check`."""
        lists = [np.asarray([tuple(int(x) for x in a) for a in acts] if not isinstance(acts, np.ndarray) else acts,
                            dtype=ACTION_DTYPE) for acts in actions_per_rank]
        counts = np.array([len(a) for a in lists], dtype=np.int32)
        flat = np.ascontiguousarray(np.concatenate(lists) if lists else np.zeros(0, ACTION_DTYPE))
        s = cls.__new__(cls)
        Handle.__init__(s, _raw.ptdp_schedule_create_custom(schedule_kind(kind_label, "kind_label"), len(lists), int(m), int(v),
                                                            flat.view(np.int32), counts))
        return s

    @property
    def info(self):
        kind, p, m, v = _raw.ptdp_schedule_info(self.handle)
        return ScheduleKind(kind), p, m, v

    kind = property(lambda self: self.info[0])
    p = property(lambda self: self.info[1])
    m = property(lambda self: self.info[2])
    v = property(lambda self: self.info[3])

    def actions(self, rank):
        """Pipeline rank ``rank``'s actions in order, as a structured array (ACTION_DTYPE)."""
        out = np.zeros(_raw.ptdp_schedule_num_actions(self.handle, int(rank)), dtype=ACTION_DTYPE)
        _raw.ptdp_schedule_actions(self.handle, int(rank), out.view(np.int32) if out.size else None)
        return out

    def check(self):
        """(ok, message): whether the schedule is valid, and the first violation when not."""
        ok, message = _raw.ptdp_schedule_check(self.handle)
        return bool(ok), message

    def simulate(self, costs=None):
        """(makespan, bubble fraction, peak slots per rank) under ``costs`` (a dict of
        ptdp_schedule_costs fields: forward, backward, backward_input, backward_weight,
        p2p_latency)."""
        peak = np.zeros(self.p, dtype=np.int32)
        makespan, bubble = _raw.ptdp_schedule_simulate(self.handle, _costs(costs), peak)
        return makespan, bubble, peak

    def write_svg(self, path, costs=None):
        """Draws the simulated timeline as an SVG file."""
        _raw.ptdp_schedule_write_svg(self.handle, _costs(costs), str(path))

    def __repr__(self):
        if self.closed:
            return "<ptdp.Schedule (closed)>"
        kind, p, m, v = self.info
        return f"<ptdp.Schedule {kind.name} p={p} m={m} v={v}>"


def schedule_kind(kind, what="kind"):
    """A ScheduleKind from itself, its value or its name ('1F1B', 'gpipe', 'zb-h1', ...)."""
    return enum_member(ScheduleKind, kind, what)
