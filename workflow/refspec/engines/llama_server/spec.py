"""A llama-server arm's settings (``server:`` in its record) and the checks of its recipe."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...core.layouts import LAYOUTS

SERVER_BUILDS = ("stock", "patched")
# a reference runs -ub 1 -np 1 (and -b 1 where accepted), no draft: arguments that would override it
REFERENCE_OVERRIDES = ("-ub", "--ubatch-size", "-b", "--batch-size", "-np", "--parallel", "-md", "--model-draft")


@dataclass(frozen=True)
class ServerSpec:
    """A black-box arm's server (``kind: server``): one that refspec starts or an existing loopback URL.

    ``binary``: a user's own ``llama-server`` (any llama.cpp version), started by refspec like a
    build; its command line is adapted to the options its ``--help`` lists.

    ``build``: ``stock`` (the pinned source, no patches) or ``patched`` ``llama-server`` of the
    native build, started by refspec on a loopback port, fresh per block; ``url``: a server that
    is already running on a loopback address (refspec cannot make it fresh: the report says so).
    ``attn_layout`` is the ``LLAMA_ATTN_LAYOUT`` value a patched server is started with; ``args``
    are extra command-line arguments; ``ready_timeout_s`` bounds the wait for ``/health``.
    """

    build: str | None = None
    url: str | None = None
    binary: str | None = None  # a user's llama-server binary (any llama.cpp version), started by refspec
    attn_layout: str | None = None
    args: tuple[str, ...] = ()
    ready_timeout_s: float = 120.0

    def record(self) -> dict:
        d = asdict(self)
        d["args"] = list(self.args)
        return {k: v for k, v in d.items() if v is not None and v != []}

    @classmethod
    def from_record(cls, rec: dict | ServerSpec) -> ServerSpec:
        if isinstance(rec, ServerSpec):
            return rec
        rec = dict(rec or {})
        rec["args"] = tuple(str(a) for a in rec.get("args") or ())
        if "ready_timeout_s" in rec:
            rec["ready_timeout_s"] = float(rec["ready_timeout_s"])
        return cls(**rec)


def check(arm) -> list[str]:
    """The problems of a server arm's recipe: exactly one of build, binary and url; a layout only
    for a patched build, and one that agrees with the arm's layout and mask."""
    s = arm.settings
    if s is None or sum(x is not None for x in (s.build, s.url, s.binary)) != 1:
        return ["a server arm names exactly one of server.build, server.binary and server.url"]
    if s.build is not None and s.build not in SERVER_BUILDS:
        return [f"server.build {s.build!r} is not one of {', '.join(SERVER_BUILDS)}"]
    if s.attn_layout is not None and s.build != "patched":
        return ["server.attn_layout needs a server refspec starts from the patched build (build: patched)"]
    name, _, mask = (s.attn_layout or "").partition(":")
    if name in LAYOUTS and (mask.isdigit() or not mask):  # a malformed value reaches
        want = (name, int(mask) if mask else 15)  # the server, which refuses it
        if (arm.layout, arm.mask) != want:
            return [
                f"layout {arm.layout} mask {arm.mask} disagree with "
                f"server.attn_layout {s.attn_layout!r} ({want[0]}, mask {want[1]})"
            ]
    return []


def reference_problems(arm) -> list[str] | None:
    """A server reference must not override refspec's micro-batch-1 command line with its own arguments."""
    given = [a for a in arm.settings.args if a.split("=", 1)[0] in REFERENCE_OVERRIDES]
    if given:
        return [
            f"server.args set {', '.join(given)}: refspec starts a reference with -ub 1 -np 1 (and -b 1 where accepted)"
        ]
    return None
