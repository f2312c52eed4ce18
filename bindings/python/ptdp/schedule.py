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
    chunks per rank. ``kind`` is a :class:`ScheduleKind` (``ScheduleKind['1F1B']``: 1F1B is not
    a Python identifier) or its name as a string, as ``--pipeline-schedule`` spells it or as the
    header does ("1f1b", "gpipe", "interleaved_1f1b", "zb-h1", "zb-v", "dualpipev", ...).

    ``actions(rank)`` returns the rank's list as a numpy structured array with fields kind,
    microbatch, chunk and peer (:data:`ACTION_DTYPE`).

    >>> import ptdp
    >>> with ptdp.Schedule("1f1b", 2, 4) as s:
    ...     s
    ...     [ptdp.ActionKind(k).name for k in s.actions(0)["kind"][:3]]
    ...     makespan, bubble, peak = s.simulate({"forward": 1, "backward": 2})
    ...     round(bubble, 3), peak.tolist()
    <ptdp.Schedule 1F1B p=2 m=4 v=1>
    ['FORWARD', 'SEND_ACTIVATION', 'FORWARD']
    (0.25, [2, 1])
    """

    _destroy = staticmethod(_raw.ptdp_schedule_destroy)

    def __init__(self, kind, p, m, v=1):
        super().__init__(_raw.ptdp_schedule_create(schedule_kind(kind), int(p), int(m), int(v)))

    @classmethod
    def custom(cls, actions_per_rank, m, v=1, kind_label="1F1B"):
        """A schedule from one action list per pipeline rank (arrays of ACTION_DTYPE, or sequences
        of (kind, microbatch, chunk, peer) tuples, the kind an :class:`ActionKind` or its name).
        Check it with :meth:`check`.

        >>> import ptdp
        >>> one_rank = [("forward", 0, 0, -1), ("forward", 1, 0, -1), ("backward", 0, 0, -1),
        ...             ("backward", 1, 0, -1)]
        >>> with ptdp.Schedule.custom([one_rank], m=2, kind_label="gpipe") as s:
        ...     s.check(), s.actions(0)["kind"].tolist() == [0, 0, 1, 1]
        ((True, ''), True)
        """
        lists = [np.asarray(acts if isinstance(acts, np.ndarray) else
                            [_action(a, f"actions_per_rank[{rank}][{i}]") for i, a in enumerate(acts)],
                            dtype=ACTION_DTYPE)
                 for rank, acts in enumerate(actions_per_rank)]
        counts = np.array([len(a) for a in lists], dtype=np.int32)
        flat = np.ascontiguousarray(np.concatenate(lists) if lists else np.zeros(0, ACTION_DTYPE))
        s = cls.__new__(cls)
        Handle.__init__(s, _raw.ptdp_schedule_create_custom(schedule_kind(kind_label, "kind_label"), len(lists),
                                                            int(m), int(v), flat.view(np.int32), counts))
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


def _action(action, what):
    """One (kind, microbatch, chunk, peer) row; the kind may be an ActionKind's name ("forward")."""
    kind, microbatch, chunk, peer = action
    return int(enum_member(ActionKind, kind, what + ".kind")), int(microbatch), int(chunk), int(peer)


def schedule_kind(kind, what="kind"):
    """A ScheduleKind from itself, its value or its name ('1F1B', 'gpipe', 'zb-h1', ...)."""
    return enum_member(ScheduleKind, kind, what)
