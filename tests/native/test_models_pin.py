"""Families of user-placed files: ``refspec models --pin`` and the config's ``families_file``.

The files are tiny real GGUFs (:mod:`support.tinygguf`); pinning needs no native build. Every
refusal is checked for its exit code and for naming the offending file or option.
"""

from __future__ import annotations

import pytest
import yaml

from refspec import cli
from refspec.core.config import config_of
from refspec.core.errors import EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE, IntegrityError
from refspec.core.hashing import sha256_file
from refspec.core.paths import REPO_ROOT
from refspec.native import models
from support.tinygguf import write_tiny


def _families(path, **fams):
    doc = {
        "families": {
            name: {
                "target": {"file": t, "sha256": None},
                "drafts": {dn: {"file": df, "sha256": None} for dn, df in drafts.items()},
                "default_draft": next(iter(drafts)),
            }
            for name, (t, drafts) in fams.items()
        }
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture()
def placed(tmp_path):
    """A models folder with two user-placed families and their unpinned families file."""
    d = tmp_path / "models"
    d.mkdir()
    write_tiny(d / "a-target.gguf", seed=1)
    write_tiny(d / "a-draft.gguf", seed=2)
    write_tiny(d / "b-target.gguf", seed=3)
    write_tiny(d / "b-draft.gguf", n_head=2, n_head_kv=2, seed=4)
    fam = _families(
        tmp_path / "families.yaml",
        fam_a=("a-target.gguf", {"small": "a-draft.gguf"}),
        fam_b=("b-target.gguf", {"small": "b-draft.gguf"}),
    )
    return d, fam


def _pin(capsys, family, models_dir, out, families, *extra):
    code = cli.main(
        [
            "models",
            "--pin",
            "--family",
            family,
            "--models-dir",
            str(models_dir),
            "--out",
            str(out),
            "--families-file",
            str(families),
            *extra,
        ]
    )
    return code, capsys.readouterr()


def test_pin_writes_a_pinned_copy_that_ensure_family_accepts(placed, tmp_path, capsys):
    d, fam = placed
    out = tmp_path / "pinned.yaml"
    # unpinned: refused, naming the command that pins
    with pytest.raises(IntegrityError, match=r"no pinned sha256.*refspec models --pin --family fam_a"):
        models.ensure_family("fam_a", models_dir=d, families_file=fam)

    code, io = _pin(capsys, "fam_a", d, out, fam)
    assert code == EXIT_OK, io.err
    doc = yaml.safe_load(out.read_text())
    a = doc["families"]["fam_a"]
    assert a["target"]["sha256"] == sha256_file(d / "a-target.gguf")
    assert a["drafts"]["small"]["sha256"] == sha256_file(d / "a-draft.gguf")
    assert doc["families"]["fam_b"]["target"]["sha256"] is None  # the rest is a copy
    files = models.ensure_family("fam_a", models_dir=d, families_file=out)
    assert files.target.path == d / "a-target.gguf" and files.target.sha256 == a["target"]["sha256"]
    assert files.draft().sha256 == a["drafts"]["small"]["sha256"]
    # a second family pinned into the same file keeps the first one's pin
    code, io = _pin(capsys, "fam_b", d, out, fam)
    assert code == EXIT_OK, io.err
    doc2 = yaml.safe_load(out.read_text())
    assert doc2["families"]["fam_a"] == a
    assert doc2["families"]["fam_b"]["drafts"]["small"]["sha256"] == sha256_file(d / "b-draft.gguf")
    # pinning the same files again is a no-op, not a conflict
    code, io = _pin(capsys, "fam_a", d, out, fam)
    assert code == EXIT_OK, io.err
    assert yaml.safe_load(out.read_text()) == doc2


def test_pin_refuses_to_replace_a_different_pin_without_force(placed, tmp_path, capsys):
    d, fam = placed
    out = tmp_path / "pinned.yaml"
    assert _pin(capsys, "fam_a", d, out, fam)[0] == EXIT_OK
    before = out.read_text()
    write_tiny(d / "a-draft.gguf", seed=99)  # the user replaced a file
    code, io = _pin(capsys, "fam_a", d, out, fam)
    assert code == EXIT_INTEGRITY and "--force" in io.err and "a-draft.gguf" in io.err
    assert out.read_text() == before
    code, io = _pin(capsys, "fam_a", d, out, fam, "--force")
    assert code == EXIT_OK, io.err
    pinned = yaml.safe_load(out.read_text())["families"]["fam_a"]["drafts"]["small"]["sha256"]
    assert pinned == sha256_file(d / "a-draft.gguf")


def test_a_changed_file_no_longer_matches_its_pin(placed, tmp_path, capsys):
    d, fam = placed
    out = tmp_path / "pinned.yaml"
    assert _pin(capsys, "fam_a", d, out, fam)[0] == EXIT_OK
    write_tiny(d / "a-target.gguf", seed=7)
    with pytest.raises(IntegrityError, match="a-target.gguf.*does not match the pinned"):
        models.ensure_family("fam_a", models_dir=d, families_file=out)


def test_pin_refuses_an_architecture_the_layouts_do_not_admit(placed, tmp_path, capsys):
    d, fam = placed
    write_tiny(d / "a-target.gguf", arch="qwen2", seed=1)
    code, io = _pin(capsys, "fam_a", d, tmp_path / "pinned.yaml", fam)
    assert code == EXIT_INTEGRITY
    assert "a-target.gguf" in io.err and "'qwen2' is not admitted" in io.err
    write_tiny(d / "a-target.gguf", qkv_bias=True, seed=1)
    code, io = _pin(capsys, "fam_a", d, tmp_path / "pinned.yaml", fam)
    assert code == EXIT_INTEGRITY and "attention bias" in io.err and "a-target.gguf" in io.err
    assert not (tmp_path / "pinned.yaml").exists()


def test_pin_refuses_a_draft_with_another_vocabulary(placed, tmp_path, capsys):
    d, fam = placed
    write_tiny(d / "a-draft.gguf", seed=2, rename_token=(40, "<0xZZ>"))
    code, io = _pin(capsys, "fam_a", d, tmp_path / "pinned.yaml", fam)
    assert code == EXIT_INTEGRITY
    assert "a-draft.gguf" in io.err and "token 40" in io.err
    assert not (tmp_path / "pinned.yaml").exists()


def test_pin_refuses_missing_and_corrupt_files(placed, tmp_path, capsys):
    d, fam = placed
    (d / "a-draft.gguf").unlink()
    code, io = _pin(capsys, "fam_a", d, tmp_path / "pinned.yaml", fam)
    assert code == EXIT_INTEGRITY and "a-draft.gguf" in io.err and "not found" in io.err
    (d / "a-draft.gguf").write_text("not a model")
    code, io = _pin(capsys, "fam_a", d, tmp_path / "pinned.yaml", fam)
    assert code == EXIT_INTEGRITY and "a-draft.gguf" in io.err and "not a GGUF" in io.err


def test_pin_usage_errors(placed, tmp_path, capsys):
    d, fam = placed
    code = cli.main(["models", "--pin", "--family", "fam_a", "--models-dir", str(d), "--families-file", str(fam)])
    assert code == EXIT_USAGE and "--out" in capsys.readouterr().err
    code, io = _pin(capsys, "no_such", d, tmp_path / "p.yaml", fam)
    assert code == EXIT_USAGE and "unknown family 'no_such'" in io.err
    code, io = _pin(capsys, "smollm2-135m", d, tmp_path / "p.yaml", REPO_ROOT / "config" / "families.yaml")
    assert code == EXIT_USAGE and "derived from a pinned wheel" in io.err
    code, io = _pin(capsys, "fam_a", tmp_path / "nowhere", tmp_path / "p.yaml", fam)
    assert code == EXIT_USAGE and "nowhere" in io.err
    code = cli.main(["models", "--out", str(tmp_path / "p.yaml")])
    assert code == EXIT_USAGE and "--pin" in capsys.readouterr().err


def test_the_configs_families_file_is_the_one_read(placed, tmp_path, capsys):
    d, fam = placed
    out = tmp_path / "pinned.yaml"
    assert _pin(capsys, "fam_a", d, out, fam)[0] == EXIT_OK
    cfg = tmp_path / "config.yaml"
    for families, expect in ((out, EXIT_OK), (fam, EXIT_INTEGRITY)):
        cfg.write_text(yaml.safe_dump({"family": "fam_a", "families_file": str(families), "models_dir": str(d)}))
        code = cli.main(["models", "--config", str(cfg)])
        io = capsys.readouterr()
        assert code == expect, io.err
        if expect == EXIT_OK:
            assert str(d / "a-target.gguf") in io.out and sha256_file(d / "a-target.gguf") in io.out
        else:
            assert "refspec models --pin" in io.err and str(fam) in io.err
    # the default families file does not know the family at all
    cfg.write_text(yaml.safe_dump({"family": "fam_a", "models_dir": str(d)}))
    assert cli.main(["models", "--config", str(cfg)]) == EXIT_USAGE
    assert "unknown family 'fam_a'" in capsys.readouterr().err
    # a relative families_file in a config is taken from the repository root
    assert (
        models.config_families_file(config_of({"family": "smollm2-135m", "families_file": "config/families.yaml"}))
        == REPO_ROOT / "config" / "families.yaml"
    )
