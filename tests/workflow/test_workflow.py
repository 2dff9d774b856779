"""The Snakemake workflow: lint, planned jobs, a small real run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT


def _snakemake(*args: str, cwd: Path = REPO_ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _planned(out: str) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a dry run."""
    counts = {}
    block = out.split("Job stats:", 1)[1]
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    return counts


def test_lint_is_clean():
    r = _snakemake("--lint")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Congratulations, your workflow is in a good condition" in r.stdout + r.stderr


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/gpu.yaml"])
def test_dry_run_plans_every_stage(configfile, tmp_path):
    r = _snakemake("-n", "--configfile", configfile, "--config", f"results={tmp_path}/res")
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = _planned(r.stdout)
    for rule in (
        "native_build",
        "models",
        "panel",
        "manifest",
        "keys",
        "assemble",
        "seal_data",
        "report",
        "seal_archive",
        "check",
        "all",
        "state_partition",
        "state_crosses",
        "admission",
    ):
        assert jobs.get(rule) == 1, f"{rule} not planned once for {configfile}: {jobs}"


@pytest.mark.parametrize(
    "text,needle",
    [
        ("family: smollm2-135m\nnative: {backend: opencl}\n", "opencl"),
        ("family: smollm2-135m\nthreads: zero\n", "zero"),
        ("threads: 2\n", None),
    ],
)
def test_bad_config_is_refused_by_schema(tmp_path, text, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    # a config that is complete on its own (no default file merged in)
    r = _snakemake("-n", "--configfile", str(bad), "--snakefile", str(REPO_ROOT / "Snakefile"))
    out = r.stdout + r.stderr
    if needle is None:  # merged with the default config: still valid
        assert r.returncode == 0, out
        return
    assert r.returncode != 0
    assert "Error validating config file" in out and needle in out


def test_gpu_config_studies_three_families_side_by_side(tmp_path):
    """config/gpu.yaml: every campaign and the replay once per family, each into campaigns/<family>/<name>."""
    import yaml

    cfg = yaml.safe_load((REPO_ROOT / "config" / "gpu.yaml").read_text())
    fams, camps = cfg["families"], cfg["campaigns"]["run"]
    assert len(fams) == 3 and cfg["native"]["backend"] == "cuda" and cfg["gpu_layers"] == "auto"
    r = _snakemake("-n", "-p", "--configfile", "config/gpu.yaml", "--config", f"results={tmp_path}/res")
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = _planned(r.stdout)
    assert jobs["campaign"] == len(fams) * len(camps), jobs
    assert jobs["replay"] == len(fams), jobs
    assert jobs["models"] == 1 and jobs["assemble"] == 1 and jobs["check"] == 1, jobs
    out = r.stdout
    for fam in fams:
        for camp in camps:
            assert f"{tmp_path}/res/campaigns/{fam}/{camp}.done" in out, (fam, camp)
            assert f"refspec campaign {camp} --family {fam} " in out, (fam, camp)
        assert f"--family {fam} --out {tmp_path}/res/campaigns/{fam}/replay" in out, fam
    # the single-family default keeps campaigns/<name> and passes no --family
    d = _snakemake("-n", "-p", "--configfile", "config/config.yaml", "--config", f"results={tmp_path}/one")
    assert d.returncode == 0 and f"{tmp_path}/one/campaigns/confirmation.done" in d.stdout
    assert "refspec campaign confirmation --family" not in d.stdout


def test_paper_preset_sizes_the_screens(tmp_path):
    """campaigns.preset paper: the partition screen's rule runs the paper's sizes (presets.paper of
    config.yaml), the divergence screen reads its own; a preset key the section lacks is refused."""
    import yaml

    from refspec.core.config import config_of, load_config, preset_settings
    from refspec.core.errors import ConfigError

    cfg = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    cfg["campaigns"]["preset"] = "paper"
    cfg["results"] = str(tmp_path / "res")
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _snakemake("-n", "-p", "--configfile", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "refspec state screen" in x)
    assert "--tasks 0-163" in line and "--inputs 2 --controls 2" in line, line
    loaded = load_config(path)
    sc = preset_settings(loaded, "screen")
    assert (sc.cap, sc.want, sc.budget, sc.controls) == (128, 20, 164, 4) and not sc.presets
    assert loaded.screen.cap == 48  # the embedded size, untouched by the preset
    assert preset_settings(loaded.replace(campaigns={"preset": "default"}), "screen").cap == 48
    cfg["screen"]["presets"]["paper"]["tries"] = 3
    with pytest.raises(ConfigError, match="tries not settings of screen"):
        preset_settings(config_of(cfg), "screen")


def test_vulkan_study_runs_the_papers_selectors_and_an_untimed_screen_beside_others(tmp_path):
    """config/vulkan.yaml: the crosses run the paper's component selectors (state.selectors; the
    default config every selector); the divergence screen is scheduled as one core's job, so the
    other untimed stages share the machine with it, while a timed campaign still takes every core."""
    from refspec.experiments.state import kvstate as kv

    schema = yaml_load(REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml")
    enum = schema["properties"]["state"]["properties"]["selectors"]["items"]["enum"]
    assert tuple(enum) == kv.SELECTOR_NAMES
    r = _snakemake(
        "-n", "-p", "--cores", "2", "--configfile", "config/vulkan.yaml", "--config", f"results={tmp_path}/v"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "state crosses" in x)
    assert "--selectors=L0_K,L0_V,K_ALL,V_ALL,PREFIX,TAIL" in line, line
    blocks = {b.split(":", 1)[0].split()[-1]: b for b in re.split(r"\n(?=(?:local)?rule )", r.stdout)}
    assert "threads: 2" not in blocks["divergence_screen"], blocks["divergence_screen"]
    assert "threads: 2" in blocks["campaign"], blocks["campaign"]
    d = _snakemake("-n", "-p", "--configfile", "config/config.yaml", "--config", f"results={tmp_path}/c")
    assert d.returncode == 0, d.stdout + d.stderr
    line = next(x for x in d.stdout.splitlines() if "state crosses" in x)
    assert "--selectors= --out" in line, line


def yaml_load(path: Path):
    import yaml

    return yaml.safe_load(path.read_text())
