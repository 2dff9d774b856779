"""``refspec qualify server --server-binary PATH`` (or ``--url URL --reference-url URL``): is a llama.cpp
server's batching and speculative decoding lossless against that same server's own greedy
micro-batch-1 output? (``anc/servers.md``)

| arm | what runs |
| --- | --- |
| ``S_ref`` (the reference) | the binary with ``-ub 1 -np 1`` (``-b 1`` where accepted), no draft (or the server at ``--reference-url``) |
| ``S_ub512`` | the same binary and model at llama.cpp's default micro-batch, ``-ub 512`` (or the server at ``--url``) |
| ``S_spec`` | the same, with the draft model (``--draft``), k proposals per cycle |

Every candidate is qualified against ``S_ref``, not against refspec's own R: a server of another
llama.cpp version has other kernels, so only its own micro-batch-1 output says whether batching or
speculation changed its tokens.
"""

from __future__ import annotations

from pathlib import Path

from ...core.engine_registry import QualifyOption, QualifyPreset, QualifySetup
from ...core.errors import UsageError
from ...provenance.manifest import Artifact
from .cli import probe_binary

REFERENCE = "S_ref"
PLAIN = "S_ub512"
SPEC = "S_spec"


def server_arms(
    *,
    binary: str | None,
    url: str | None,
    reference_url: str | None,
    speculative: bool,
    k: int = 3,
    ready_timeout_s: float = 300.0,
) -> dict:
    """The arms file of a server qualification (``arms:`` mapping, validated by the arms schema)."""
    if (binary is None) == (url is None):
        raise UsageError("name exactly one of --server-binary PATH and --url URL")
    if url is not None and reference_url is None:
        raise UsageError("--url needs --reference-url: a server you start with -ub 1 -b 1 -np 1 and no draft")
    if binary is not None and reference_url is not None:
        raise UsageError("--reference-url goes with --url; with --server-binary refspec starts the reference")
    if binary is not None:
        p = Path(binary).expanduser()
        if not p.is_file():
            raise UsageError(f"--server-binary {binary}: no such file")
        where = {"binary": str(p.resolve())}
        ref_where, plain_where = where, where
    else:
        ref_where, plain_where = {"url": reference_url}, {"url": url}
    base = {"kind": "server", "layout": "mq", "mask": 0}
    arms = {
        REFERENCE: {
            **base,
            "mode": "target",
            "ub": 1,
            "server": {**ref_where, "ready_timeout_s": ready_timeout_s},
            "description": "the server's own reference: micro-batch 1 (-ub 1), one slot, no draft",
        },
        PLAIN: {
            **base,
            "mode": "spec" if (url is not None and speculative) else "target",
            "ub": 512,
            "k": k,
            "server": {**plain_where, "ready_timeout_s": ready_timeout_s},
            "description": "the same server at -ub 512" if binary else "the server at --url",
        },
    }
    if binary is not None and speculative:
        arms[SPEC] = {
            **base,
            "mode": "spec",
            "ub": 512,
            "k": k,
            "server": {**where, "ready_timeout_s": ready_timeout_s},
            "description": "the same server at -ub 512 with the draft model",
        }
    return arms


def usage(o: dict) -> None:
    """A server qualification names the server: a binary, or a candidate URL with its reference's."""
    if not (o.get("server_binary") or o.get("url")):
        raise UsageError("qualify server needs --server-binary PATH, or --url URL with --reference-url URL")


def setup(o: dict) -> QualifySetup:
    """The arms of ``--server-binary`` (refspec starts the reference and the candidates) or of
    ``--url`` with ``--reference-url`` (servers you started; :func:`usage` has refused neither)."""
    binary, url, reference_url = o.get("server_binary"), o.get("url"), o.get("reference_url")
    arms = server_arms(
        binary=binary, url=url, reference_url=reference_url, speculative=o.get("draft") is not None, k=o["k"]
    )
    version, ref_args = None, "your server at --reference-url"
    if binary:
        probe = probe_binary(Path(binary), Path(binary).resolve().parent)
        version = probe["version"]
        ref_args = "-ub 1 -b 1 -np 1" if probe["options"].batch_one else "-ub 1 -np 1"
    record = {"server": {"binary": binary, "version": version, "url": url, "reference_url": reference_url}}
    return QualifySetup(arms, version, ref_args, binary or url, record, tool=binary)


def pins(files, draft: str | None, s: QualifySetup, lib_dir: Path) -> tuple[list, dict, dict]:
    """The binary refspec started (its sha256 and ``--version``), when it started one."""
    arts = [] if s.tool is None else [Artifact(f"llama-server ({s.version or 'no --version'})", "tool", Path(s.tool))]
    return arts, {}, {"server_binary": s.tool, "server_version": s.version}


PRESET = QualifyPreset(
    command="server",
    help="a llama.cpp server against its own micro-batch-1 reference (exit 0 every candidate reproduces it, "
    "1 one does not, 5 a request or server failed)",
    reference=REFERENCE,
    default_k=3,
    setup=setup,
    pins=pins,
    usage=usage,
    options=(
        QualifyOption(
            ("--server-binary",), "a llama-server binary (any version); refspec starts its reference and arms"
        ),
        QualifyOption(("--url",), "a candidate server you started (loopback)"),
        QualifyOption(("--reference-url",), "its reference, started by you with -ub 1 -b 1 -np 1 and no draft"),
    ),
)
