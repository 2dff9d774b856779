"""The command line of a ``llama-server`` of any llama.cpp version (``anc/servers.md``).

llama.cpp renames and drops server options between releases. refspec probes a binary once
(``--help`` and ``--version``, :func:`probe_binary`, cached per binary digest) and builds the
command from the options that binary lists (:class:`ServerOptions`, :func:`server_command`):

| what | newer servers | older servers (e.g. llama.cpp 4227c9be) |
| --- | --- | --- |
| web UI off | ``--no-ui`` | ``--no-webui`` |
| flash attention off | ``-fa off`` | ``-fa`` is a switch, off by default: omitted |
| memory fitting off | ``-fit off`` | absent: omitted |
| RAM prompt cache off | ``-cram 0`` | absent: omitted |
| draft settings | ``--spec-type draft-simple --spec-draft-n-max K --spec-draft-n-min 0 --spec-draft-p-min 0`` | ``--draft-max K --draft-min 0 --draft-p-min 0`` |

A server whose draft options are the older ``--draft-*`` family runs its draft model only for
requests with ``cache_prompt: true`` (its ``can_speculate``). refspec then starts it with
``--slot-save-path`` and erases the slot before every request, so each prompt is computed
whole as with ``cache_prompt: false`` (:attr:`ServerOptions.legacy_draft`).

A reference server (:func:`reference_args`) runs ``-ub 1 -np 1`` without a draft, and ``-b 1`` where
the server accepts it (:attr:`ServerOptions.batch_one`).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from ...core.arms import Arm
from ...core.hashing import sha256_bytes, sha256_file


@dataclass(frozen=True)
class ServerOptions:
    """What a ``llama-server`` binary accepts, read from its ``--help`` text."""

    no_ui: str | None = "--no-ui"  # --no-ui, --no-webui or None (no web UI switch)
    fa_value: bool = True  # -fa takes on|off|auto (else a switch, off unless given)
    fit: bool = True  # -fit on|off
    cram: bool = True  # -cram N (RAM prompt cache)
    spec_type: bool = True  # --spec-type draft-simple
    spec_prefix: str = "--spec-draft-"  # --spec-draft-n-max ... or --draft- (--draft-max ...)
    slot_save_path: bool = True

    @property
    def batch_one(self) -> bool:
        """Whether a reference gets ``-b 1`` beside ``-ub 1``: older servers (the ``--draft-*``
        generation) raise a logical batch below 64 to 64 and run; the pinned newer server aborts
        at ``-b 1`` (``get_sub_batch: failed to add token``), so it keeps its default logical batch,
        which ``-ub 1`` splits into one-row micro-batches."""
        return self.legacy_draft

    @property
    def legacy_draft(self) -> bool:
        """Older draft path: speculation only with ``cache_prompt: true`` (a slot erase per request)."""
        return self.spec_prefix == "--draft-"

    def record(self) -> dict:
        return {**asdict(self), "legacy_draft": self.legacy_draft, "batch_one": self.batch_one}


def _has(help_text: str, flag: str) -> bool:
    return re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", help_text, re.M) is not None


def parse_help(help_text: str) -> ServerOptions:
    """The options a server's ``--help`` lists (missing ones are left out of its command line)."""
    fa = re.search(r"-fa,\s*--flash-attn\s*(\S*)", help_text)
    return ServerOptions(
        no_ui="--no-ui" if _has(help_text, "--no-ui") else "--no-webui" if _has(help_text, "--no-webui") else None,
        fa_value=bool(fa and re.search(r"on|off|auto|FA", fa.group(1))),
        fit=_has(help_text, "-fit"),
        cram=_has(help_text, "-cram"),
        spec_type=_has(help_text, "--spec-type"),
        spec_prefix="--spec-draft-" if _has(help_text, "--spec-draft-n-max") else "--draft-",
        slot_save_path=_has(help_text, "--slot-save-path"),
    )


_PROBES: dict[str, dict] = {}


def probe_binary(binary: Path, lib_dir: Path | None = None, timeout: float = 60.0) -> dict:
    """``--help`` and ``--version`` of a server binary (once per binary digest): its sha256, version
    text and :class:`ServerOptions`."""
    binary = Path(binary).resolve()
    digest = sha256_file(binary)
    if digest in _PROBES:
        return _PROBES[digest]
    env = None if lib_dir is None else {**os.environ, "LD_LIBRARY_PATH": str(lib_dir)}

    def run(arg: str) -> str:
        p = subprocess.run([str(binary), arg], capture_output=True, text=True, timeout=timeout, env=env)
        return (p.stdout or "") + (p.stderr or "")

    help_text = run("--help")
    version = " ".join(line.strip() for line in run("--version").splitlines() if line.strip().startswith("version"))
    out = {
        "binary": str(binary),
        "sha256": digest,
        "version": version or None,
        "options": parse_help(help_text),
        "help_sha256": sha256_bytes(help_text.encode()),
    }
    _PROBES[digest] = out
    return out


def reference_args(arm: Arm) -> bool:
    """Whether a started server runs as a reference: target only at micro-batch 1 (``-ub 1 -b 1 -np 1``)."""
    return not arm.speculative and arm.ub == 1


def server_command(
    binary: Path,
    arm: Arm,
    target: Path,
    draft: Path | None,
    port: int,
    opts: ServerOptions | None = None,
    slot_dir: Path | None = None,
) -> list[str]:
    """``llama-server`` started as the arm says, with the options ``opts`` (the binary's) accepts:
    one slot, greedy-ready, flash attention off; a micro-batch-1 target-only arm adds ``-b 1``."""
    o = opts or ServerOptions()
    gl = str(int(arm.gpu_layers or 0))
    cmd = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-t", str(arm.threads), "-tb", str(arm.threads), "-c", str(arm.n_ctx), "-ub", str(arm.ub)]
    if reference_args(arm) and o.batch_one:
        cmd += ["-b", "1"]
    cmd += ["-np", "1"]
    if o.fa_value:
        cmd += ["-fa", "off"]
    if o.fit:
        cmd += ["-fit", "off"]
    cmd += ["-ctk", arm.kv_type, "-ctv", arm.kv_type, "-ngl", gl]
    if o.cram:
        cmd += ["-cram", "0"]
    if o.no_ui:
        cmd.append(o.no_ui)
    cmd += ["--seed", "0"]
    if draft is not None:
        cmd += ["-md", str(draft), "-ngld", gl]
        if o.spec_type:
            cmd += ["--spec-type", "draft-simple"]
        p = o.spec_prefix
        nmax, nmin, pmin = (
            (f"{p}n-max", f"{p}n-min", f"{p}p-min")
            if p == "--spec-draft-"
            else (
                f"{p}max",
                f"{p}min",
                f"{p}p-min",
            )
        )
        cmd += [nmax, str(arm.k), nmin, "0", pmin, "0"]
        if o.legacy_draft and slot_dir is not None:
            cmd += ["--slot-save-path", str(slot_dir)]
    return cmd + list(arm.settings.args if arm.kind == "server" and arm.settings is not None else ())
