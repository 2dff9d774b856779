"""The workflow's manifest rule takes as inputs exactly the files the manifest's source digest
hashes (``refspec.provenance.manifest.SOURCE_ROOTS``), so a change to any of them re-runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from refspec.core.paths import REPO_ROOT, package_path
from refspec.provenance import manifest as M


def _manifest_rule_inputs(tmp_path) -> dict[str, list[str]]:
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        "import json\n"
        f"include: {str(REPO_ROOT / 'Snakefile')!r}\n"
        'print("MANIFEST-INPUTS " + json.dumps({k: [str(f) for f in v] if isinstance(v, list) else [str(v)]'
        " for k, v in rules.manifest.rule.input.items()}))\n"
    )
    env = dict(os.environ, PYTHONPATH=package_path())
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(snakefile), "--configfile", "config/config.yaml"]
        + ["--config", f"results={tmp_path}/res"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("MANIFEST-INPUTS ")), None)
    assert line is not None, r.stdout + r.stderr
    return json.loads(line.split(" ", 1)[1])


def test_manifest_rule_inputs_are_the_files_of_the_source_digest(tmp_path):
    inputs = _manifest_rule_inputs(tmp_path)
    digest_files = [rel for rel, _ in M._source_files(REPO_ROOT, M.SOURCE_ROOTS)]
    assert sorted(inputs["sources"]) == digest_files
    # every root of the digest is among them: the rules, the schemas, the environment, the entry point
    for rel in ("Snakefile", "run", "pyproject.toml", "envs/requirements.txt", "workflow/rules/common.smk"):
        assert rel in inputs["sources"], rel
    assert any(f.startswith("workflow/schemas/") for f in inputs["sources"])
    assert M.source_entry()["annotations"]["files"] == len(inputs["sources"])
    # the configuration files stay inputs of their own
    assert "config/config.yaml" in inputs["configs"]
