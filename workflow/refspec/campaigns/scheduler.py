"""The campaign schedules: sessions of fresh-worker blocks, every order drawn from a seed.

Schedules
    A campaign's schedule is a list of sessions; a session is an ordered list of
    *blocks*; a block is one arm and an ordered list of planned requests
    ``(task_id, cap, repeat)`` served by one fresh worker (the driver starts a
    new worker for every block, runs its registered warmup, then the requests).
    Every order is drawn from the definition's ``seed`` with
    :func:`derive_rng`, so the same definition always gives the same schedule
    (it is frozen into the plan before the first session).

The two designs (``design`` in a campaign definition)
    *fresh* (the paper's, and the default): every block serves one arm, so two arms are
    always timed in different processes. *paired* (:func:`paired_schedule`): every block is
    one process that serves every arm of the comparison, and its requests alternate between
    the arms request by request (``(task_id, cap, repeat, arm)``), so the process's start-up
    state is shared by both sides of every contrast.

The sessions run in :mod:`refspec.campaigns.runner`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.arms import REFERENCE_ARM
from ..core.errors import UsageError

# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Req:
    task_id: str
    cap: int
    repeat: int
    arm: str | None = None  # a paired block's request names its arm; None: the block's one arm

    def record(self) -> list:
        return [self.task_id, self.cap, self.repeat] + ([self.arm] if self.arm is not None else [])


@dataclass
class BlockPlan:
    session: str
    index: int
    arm: str
    requests: list[Req]
    role: str = ""  # what the block is in the design: "reference", "A", "B", "round 2", ...
    also_arms: tuple[str, ...] = ()  # paired: the other arms the block's one process serves

    @property
    def arms(self) -> tuple[str, ...]:
        """Every arm the block's process serves, its first arm first."""
        return (self.arm, *self.also_arms)

    def arm_of(self, r: Req) -> str:
        return r.arm or self.arm

    def record(self) -> dict:
        rec = {
            "index": self.index,
            "arm": self.arm,
            "role": self.role,
            "requests": [r.record() for r in self.requests],
        }
        if self.also_arms:
            rec["also_arms"] = list(self.also_arms)
        return rec


@dataclass
class SessionPlan:
    id: str
    blocks: list[BlockPlan]
    note: str = ""

    def record(self) -> dict:
        return {"session": self.id, "note": self.note, "blocks": [b.record() for b in self.blocks]}

    @property
    def n_requests(self) -> int:
        return sum(len(b.requests) for b in self.blocks)


def session_ids(n: int, suffixes: Sequence[str] | None = None) -> list[str]:
    """``s01``, ``s02``, ... (plain string order = chronological order, as the statistics sort them)."""
    width = max(2, len(str(n)))
    out = [f"s{i + 1:0{width}d}" for i in range(n)]
    if suffixes:
        out = [f"{s}-{x}" for s, x in zip(out, suffixes)]
    return out


def derive_rng(seed: int, *parts: Any) -> random.Random:
    """A ``random.Random`` seeded from sha256 of the seed and ``parts`` (stable across processes)."""
    text = "/".join([str(int(seed)), *(str(p) for p in parts)])
    return random.Random(int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big"))


def factorial_orders(n: int, rng: random.Random, session_index: int = 0) -> list[tuple[int, int]]:
    """``n`` (orientation, path order) pairs covering the 2 x 2 factorial as evenly as possible.

    Every full set of four groups gets each combination once (so orientation,
    path order and the layout that opens the group all balance); the remainder
    takes a rotation of the combinations that moves on with the session index
    (so the leftovers balance over sessions). The order is drawn from ``rng``.
    """
    base = [(0, 0), (1, 1), (0, 1), (1, 0)]
    r = n % 4
    rot = (session_index * r) % 4
    rotated = base[rot:] + base[:rot]
    out = base * (n // 4) + rotated[:r]
    rng.shuffle(out)
    return out


def _shuffled(items: Sequence, rng: random.Random) -> list:
    out = list(items)
    rng.shuffle(out)
    return out


def round_schedule(
    sessions: Sequence[str],
    others: Sequence[str],
    task_ids: Sequence[str],
    *,
    caps: Sequence[int],
    repeats: int,
    block_by: str,
    seed: int,
    reference: str = REFERENCE_ARM,
    reference_repeats: int | None = None,
) -> list[SessionPlan]:
    """Blocks of whole arms, counterbalanced by reversing the arm order.

    The arm order (without the reference) is drawn afresh from the seed for every session
    and pair of rounds; the second round of a pair runs it reversed (so within a pair every
    arm has the same mean position, and which arm precedes which is random across sessions
    and pairs instead of fixed for the whole campaign). ``block_by =
    arm_repeat``: one round per repeat, each round the reference block then
    every other arm (one repeat each); ``arm``: the reference, every arm with
    all its repeats, the reference again. The reference runs
    ``max(2, repeats)`` times per session (``reference_repeats``): repeats
    beyond the rounds run in reference blocks at the end. Within a block the
    requests go cap by cap, repeat by repeat, tasks in a seeded order.
    """
    ref_reps = reference_repeats or max(2, repeats)

    def order(sid: str, r: int) -> list[str]:
        drawn = _shuffled(others, derive_rng(seed, "arm-order", sid, (r - 1) // 2))
        return drawn if r % 2 == 1 else drawn[::-1]

    out = []
    for si, sid in enumerate(sessions):
        blocks: list[BlockPlan] = []

        def add(arm: str, reps: Iterable[int], role: str) -> None:
            reps = list(reps)
            if not reps:
                return
            idx = len(blocks)
            rng = derive_rng(seed, "tasks", sid, idx)
            reqs = [Req(t, c, r) for c in caps for r in reps for t in _shuffled(task_ids, rng)]
            blocks.append(BlockPlan(sid, idx, arm, reqs, role))

        if block_by == "arm_repeat":
            for r in range(1, repeats + 1):
                add(reference, [r] if r <= ref_reps else [], f"reference, round {r}")
                for a in order(sid, r):
                    add(a, [r], f"round {r}")
            for r in range(repeats + 1, ref_reps + 1):
                add(reference, [r], "reference, closing")
        elif block_by == "arm":
            first = (ref_reps + 1) // 2
            add(reference, range(1, first + 1), "reference, opening")
            for a in order(sid, 1):
                add(a, range(1, repeats + 1), "all repeats")
            add(reference, range(first + 1, ref_reps + 1), "reference, closing")
        else:  # pragma: no cover - the schema allows only these two
            raise UsageError(f"unknown block_by {block_by!r}")
        out.append(SessionPlan(sid, blocks))
    return out


def abba_schedule(
    sessions: Sequence[str],
    task_ids: Sequence[str],
    *,
    paths: Sequence[str],
    layouts: Sequence[str],
    arm_for: Callable[[str, str], str],
    block_tasks: int,
    cap: int,
    repeats: int,
    references: int,
    seed: int,
    reference: str = REFERENCE_ARM,
    twins: dict[str, str] | None = None,
) -> list[SessionPlan]:
    """Short counterbalanced blocks (replication E2).

    Per session, the tasks are put in a seeded order and cut into groups of
    ``block_tasks``. Each group is one short sequence of fresh workers::

        R  |  path1: A B  |  path2: B A  |  R

    A and B are the two layouts; the two paths of a group always take
    opposite orders, so each group reads ABBA. Which layout the first
    configured path runs first and which path goes first are crossed over the
    groups of a session (:func:`factorial_orders`: each of the four
    combinations once per four groups, leftovers rotating over sessions) in an
    order drawn from the seed -- so within each path as many groups start with
    either layout, and as many groups open with either layout. The
    reference blocks carry the serial-reference endpoints: ``references`` per
    task and session, the first half before and the rest after the PQ/QB
    blocks. Every block runs its group's tasks in the same order.

    ``twins`` maps an arm to its A/A twin: the twin's block sits next to its arm's
    in every group, after it in even-numbered (group + session) positions and before
    it otherwise, so each runs first equally often.
    """
    twins = twins or {}
    out = []
    first_refs = (references + 1) // 2
    for si, sid in enumerate(sessions):
        rng = derive_rng(seed, "abba", sid)
        tasks = _shuffled(task_ids, rng)
        groups = [tasks[i : i + block_tasks] for i in range(0, len(tasks), block_tasks)]
        combos = factorial_orders(len(groups), rng, si)
        lay_first = [o for o, _p in combos]
        path_first = [p for _o, p in combos]
        blocks: list[BlockPlan] = []

        def add(arm: str, gtasks: list[str], reps: Iterable[int], role: str) -> None:
            reps = list(reps)
            if reps:
                blocks.append(BlockPlan(sid, len(blocks), arm, [Req(t, cap, r) for r in reps for t in gtasks], role))

        for g, gtasks in enumerate(groups):
            add(reference, gtasks, range(1, first_refs + 1), f"group {g}: reference")
            ps = list(paths) if path_first[g] == 0 else list(reversed(paths))
            for path in ps:
                # the first configured path takes the drawn orientation, the other path its reverse: ABBA
                flip = (lay_first[g] + list(paths).index(path)) % 2
                lays = list(layouts) if flip == 0 else list(reversed(layouts))
                for pos, lay in zip("AB", lays):
                    arm = arm_for(path, lay)
                    pair = [(arm, pos), (twins[arm], pos + " A/A twin")] if arm in twins else [(arm, pos)]
                    for a, role in pair if (g + si) % 2 == 0 else reversed(pair):
                        add(a, gtasks, range(1, repeats + 1), f"group {g}: {path} {role}")
            add(reference, gtasks, range(first_refs + 1, references + 1), f"group {g}: reference")
        out.append(SessionPlan(sid, blocks))
    return out


def schedule_record(sessions: Sequence[SessionPlan]) -> list[dict]:
    return [s.record() for s in sessions]


def process_orders(arms: Sequence[str], rounds: int, rng: random.Random) -> list[list[str]]:
    """The arms' orders of one process's ``rounds`` rounds, in pairs: a drawn order, then the same
    order reversed (a last round without a partner takes a drawn order of its own).

    Within each pair every arm's two positions sum to ``n - 1`` and every arm runs once before and
    once after every other, so a trend of the request time over a round's positions (measured: the
    first requests of a round 4 to 7 % slower than the last in the implementation campaign of two
    default runs) cancels from every contrast inside each process, instead of only over a full
    Williams square of the campaign's rounds, which a campaign of a few short processes never
    completes. The orders are drawn per process, so processes are independent draws of one design
    and the interval over them holds what the order leaves (which arm ran just before)."""
    out: list[list[str]] = []
    for j in range(rounds):
        out.append(list(reversed(out[-1])) if j % 2 else _shuffled(arms, rng))
    return out


def paired_schedule(
    sessions: Sequence[str],
    arms: Sequence[str],
    task_ids: Sequence[str],
    *,
    caps: Sequence[int],
    repeats: int,
    processes: int,
    seed: int,
) -> list[SessionPlan]:
    """The paired design: per session ``processes`` blocks, each one process serving every arm.

    A block's requests come in rounds: one request of every arm on one task. The rounds go cap by
    cap, repeat by repeat (``repeats`` per process, numbered on across the session's processes:
    process ``p`` runs repeats ``p * repeats + 1 .. (p + 1) * repeats``), the tasks in an order drawn per block.
    The arms' orders come in pairs of rounds, a drawn order and its reverse (:func:`process_orders`),
    drawn per process: every arm takes the same mean position, and runs before and after every other
    arm equally often, inside every process. The process's first arm is the first of its first round
    (the worker's first arm, and the first context it creates: that order is drawn per process too);
    each arm's registered warmup runs before its first timed request."""
    per_process = len(caps) * repeats * len(task_ids)
    out = []
    for sid in sessions:
        blocks: list[BlockPlan] = []
        for p in range(processes):
            rng = derive_rng(seed, "paired", sid, p)
            reps = range(p * repeats + 1, (p + 1) * repeats + 1)
            rounds = [(c, r, t) for c in caps for r in reps for t in _shuffled(task_ids, rng)]
            orders = process_orders(arms, per_process, derive_rng(seed, "paired-order", sid, p))
            reqs = [Req(t, c, r, a) for (c, r, t), order in zip(rounds, orders) for a in order]
            first = orders[0]
            blocks.append(BlockPlan(sid, p, first[0], reqs, f"paired process {p + 1}", tuple(first[1:])))
        out.append(SessionPlan(sid, blocks))
    return out
