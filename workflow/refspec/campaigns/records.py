"""A campaign folder as recorded: its settings, its ledger and journal, and what they say.

What is final, what is left, which workers were used, where sessions start and end, the
reference endpoints, and the base tables (requests, endpoints, qualification, sessions).
:class:`refspec.campaigns.runner.CampaignRun` runs sessions into it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.arms import REFERENCE_ARM, Arm
from ..core.errors import IntegrityError
from ..engine.context import process_number
from ..engine.journal import Journal
from ..provenance.ledger import Ledger
from .derived import qualification_table, session_gaps
from .scheduler import SessionPlan


@dataclass
class RunSettings:
    campaign: str
    out_dir: Path
    family: str
    files: Any  # refspec.native.models.FamilyFiles
    draft: str | None
    arms: dict[str, Arm]
    arms_file: Path
    lib_dir: Path
    tasks: dict[str, Any]  # task_id -> refspec.core.panels.Task (all panels of the campaign)
    definition: dict
    manifest: Path | None = None
    progress: bool = True
    resume: bool = False
    reference: str = REFERENCE_ARM  # the campaign's reference arm (definition ``reference``)


class CampaignRecords:
    """One campaign folder: its ledger and journal, and what they say about the campaign so far."""

    def __init__(self, settings: RunSettings):
        self.s = settings
        self.out = Path(settings.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.out / "ledger.jsonl")
        self.journal = Journal(self.out / "journal.jsonl")
        self.defn = settings.definition
        self.reference = settings.reference
        self.campaign = settings.campaign

    # ------------------------------------------------------------------ ledger helpers
    def note(self, kind: str, reason: str, **kw) -> dict:
        rec = {"kind": kind, "reason": reason, "campaign": self.campaign, "family": self.s.family}
        rec.update({k: v for k, v in kw.items() if v is not None})
        return self.ledger.append(rec)

    def ledger_records(self) -> list[dict]:
        return self.ledger.records()

    def journal_records(self) -> list[dict]:
        self._check_journal_tail()
        return [r for r in self.journal.records() if r.get("type") == "request"]

    def _check_journal_tail(self) -> None:
        p = self.journal.path
        if p.exists() and p.stat().st_size:
            with open(p, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    raise IntegrityError(f"{p} ends with an incomplete line (torn write); refusing to append to it")

    # ------------------------------------------------------------------ state
    def workers_used(self) -> int:
        """The highest worker number used so far (worker ids are unique in the whole campaign)."""
        n = 0
        for r in self.ledger_records():
            if r.get("worker"):
                n = max(n, process_number(str(r["worker"])))
        wdir = self.out / "workers"
        if wdir.is_dir():
            for p in wdir.iterdir():
                n = max(n, process_number(p.name.split(".", 1)[0]))
        return n

    def slot_state(self) -> tuple[set, dict, dict]:
        """(final slots, last attempt per slot, failures per slot); slot = (session, block, arm, task, cap, repeat).

        A slot is final when it has a completed attempt, when the driver could not start a
        worker for it after its allowed starts ("no worker: ..."), or when it failed
        ``retries + 1`` times (interruptions of the campaign process not counted).
        """
        done, last, fails = set(), {}, {}
        for r in self.journal_records():
            row = r["row"]
            if row["status"] == "excluded_warmup":
                continue
            k = (row["session"], row["block"], row["arm"], row["task_id"], row["cap"], row["repeat"])
            last[k] = max(last.get(k, 0), row["attempt"])
            reason = str(row["reason"] or "")
            if row["status"] == "ok":
                done.add(k)
            elif reason.startswith("no worker:"):
                done.add(k)  # the driver used up its worker starts for the block (e.g. admission refused)
            elif not reason.startswith("interrupted:"):
                fails[k] = fails.get(k, 0) + 1
        retries = int(self.defn.get("retries", 1))
        for k, n in fails.items():
            if n >= retries + 1:
                done.add(k)  # a final failure: recorded, not re-run again
        return done, last, fails

    def start_failures(self) -> dict[str, list[str]]:
        """arm -> the error lines of its failed worker starts (ledger ``failure`` records)."""
        out: dict[str, list[str]] = {}
        for r in self.ledger_records():
            reason = str(r.get("reason") or "")
            if r.get("kind") == "failure" and reason.startswith("worker start failed") and r.get("arm"):
                lines = [ln.strip() for ln in reason.splitlines() if "error:" in ln]
                out.setdefault(r["arm"], []).append(lines[-1] if lines else reason.splitlines()[0])
        return out

    def remaining(self, sessions: Sequence[SessionPlan]) -> int:
        done, _, _ = self.slot_state()
        n = 0
        for s in sessions:
            for b in s.blocks:
                n += sum(1 for q in b.requests if (s.id, b.index, b.arm_of(q), q.task_id, q.cap, q.repeat) not in done)
        return n

    def session_marks(self) -> dict[str, dict]:
        """session -> {"start": rec, "end": rec} from the ledger."""
        out: dict[str, dict] = {}
        for r in self.ledger_records():
            k = r.get("kind")
            if k in ("session_start", "session_end") and r.get("session"):
                d = out.setdefault(r["session"], {})
                if k == "session_start":
                    d.setdefault("start", r)
                else:
                    d["end"] = r
        return out

    # ------------------------------------------------------------------ reference
    def reference_endpoints(self, records: list[dict] | None = None) -> dict[tuple[str, int], dict]:
        """(task_id, cap) -> the first completed R endpoint row in (session, repeat) order."""
        records = self.journal_records() if records is None else records
        refs = sorted(
            (r for r in records if r["row"]["arm"] == self.reference and r["endpoint"] is not None),
            key=lambda r: (r["row"]["session"], r["row"]["repeat"]),
        )
        out: dict[tuple[str, int], dict] = {}
        for r in refs:
            out.setdefault((r["row"]["task_id"], r["row"]["cap"]), r["endpoint"])
        return out

    # ------------------------------------------------------------------ tables
    def base_tables(self) -> dict[str, list[dict]]:
        """requests, endpoints, qualification and sessions from the journal and the ledger."""
        records = self.journal_records()
        requests = [r["row"] for r in records]
        endpoints = [r["endpoint"] for r in records if r["endpoint"] is not None]
        margins: dict = {}
        for r in sorted(
            (r for r in records if r["row"]["arm"] == self.reference and r["endpoint"] is not None),
            key=lambda r: (r["row"]["session"], r["row"]["repeat"]),
        ):
            row = r["row"]
            if r.get("margins") is not None:
                margins.setdefault((row["campaign"], row["family"], row["task_id"], row["cap"]), r["margins"])
        # every completed request's own margins (each arm's, along its own path), by endpoint
        arm_margins = {
            (
                r["endpoint"]["campaign"],
                r["endpoint"]["family"],
                r["endpoint"]["task_id"],
                r["endpoint"]["cap"],
                r["endpoint"]["arm"],
                r["endpoint"]["session"],
                r["endpoint"]["repeat"],
            ): r["margins"]
            for r in records
            if r["endpoint"] is not None and r.get("margins") is not None
        }
        qual = qualification_table(
            requests,
            endpoints,
            campaign=self.campaign,
            margins=margins,
            reference_arm=self.reference,
            arm_margins=arm_margins,
        )
        # sessions: first submit .. last recorded outcome, from the ledger's times
        first: dict[str, str] = {}
        last: dict[str, str] = {}
        for r in self.ledger_records():
            sess = r.get("session")
            if not sess:
                continue
            if r.get("kind") == "submit":
                first.setdefault(sess, r["time"])
            if r.get("kind") in ("attempt", "failure", "interruption", "excluded_warmup", "submit") and r.get("worker"):
                last[sess] = r["time"]
        rows = []
        for sess in sorted({q["session"] for q in requests}):
            srows = [q for q in requests if q["session"] == sess]
            start = first.get(sess)
            end = last.get(sess)
            if start is None or end is None:
                continue
            rows.append(
                dict(
                    campaign=self.campaign,
                    family=self.s.family,
                    session=sess,
                    started_utc=start,
                    ended_utc=end,
                    gap_before_s=None,
                    n_requests=len(srows),
                    n_workers=len({q["worker"] for q in srows}),
                )
            )
        sessions = session_gaps(rows)
        return {
            "requests": requests,
            "endpoints": endpoints,
            "qualification": qual,
            "sessions": sessions,
            "_records": records,
        }
