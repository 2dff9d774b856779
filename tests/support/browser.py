"""Headless Chromium as a reader's browser for the report tests: load a page with a probe script
and read back what the script measured."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def probe_page(page: Path, script: str, pre_id: str, tmp: Path, width: int, hide_scrollbars: bool = False) -> str:
    """The text ``script`` (put in place of ``page``'s ``</body>``) writes into ``<pre id=pre_id>``
    once the page has loaded in headless Chromium ``width`` px wide (the probe is a copy beside
    ``page``, removed afterwards); a page the script did not report on fails with Chromium's stderr."""
    probe = page.with_name(f"probe-{pre_id}-{width}.html")
    probe.write_text(page.read_text().replace("</body>", script, 1))
    try:
        r = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                *(["--hide-scrollbars"] if hide_scrollbars else []),
                f"--user-data-dir={tmp / 'ud'}",
                f"--window-size={width},2000",
                "--dump-dom",
                probe.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()
    m = re.search(rf'<pre id="{pre_id}">(.*?)</pre>', r.stdout, re.S)
    assert m, r.stderr[-2000:]
    return html.unescape(m.group(1))
