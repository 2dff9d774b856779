"""The run's artifact list and its signing key, what the manifest and the seals need; the steps
from the run's results to the checked archive are :mod:`refspec.pipeline.seal_chain`.

What the commands the Snakemake rules call do (their command lines are in
:mod:`refspec.commands`):

``refspec artifacts``    list the run's artifacts (sdist, patches, built libraries
                         and tools, model files, panels) for ``refspec manifest``;
``refspec keys-ensure``  create the signing key pair once, outside the repository,
                         and copy its public half where the workflow wants it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.config import Config, study_families
from ..core.errors import UsageError
from ..native import build as native
from ..native import sdist
from ..native.models import config_families_file, ensure_family
from ..native.tools import NATIVE_TOOLS
from ..provenance import keys

# --------------------------------------------------------------------------- artifacts


def artifacts(cfg: Config, build_record: Path, panels: list[Path]) -> list[dict]:
    """The run's artifacts for config ``cfg`` (its native build, built if needed, must be the one
    ``build_record`` records), each ``{"role", "name", "path"}``."""
    rec = json.loads(build_record.read_text())
    b = native.current(cfg)
    if b.key != rec["key"]:
        raise UsageError(f"{build_record} records build {rec['key'][:16]}, the config selects {b.key[:16]}")
    out = [{"role": "sdist", "name": sdist.SDIST_FILE, "path": str(sdist.fetch_sdist())}]
    out += [{"role": "patch", "name": p.name, "path": str(p)} for p in native.patch_files()]
    out += [{"role": "library", "name": name, "path": str(b.lib_dir / name)} for name in sorted(rec["files"])]
    for name, key in NATIVE_TOOLS.items():  # refspec-replay, refspec-opreplay
        if key not in rec:
            raise UsageError(f"{build_record} does not record {name}: run again with --forcerun native_build")
        if rec[key].get("sha256") != (b.record.get(key) or {}).get("sha256"):
            raise UsageError(f"{build_record} records another {name} than the build's {b.tool(name)}")
        out.append({"role": "tool", "name": name, "path": str(b.tool(name))})
    if "servers" in cfg.campaigns.run:  # llama-server, stock and patched
        opts = native.BuildOptions.from_config(cfg)
        for variant in native.SERVER_VARIANTS:
            sb = native.build_server(opts, variant)
            for name in sorted(sb.record["files"]):
                role = "tool" if name == native.SERVER_TARGET else "library"
                out.append({"role": role, "name": f"{variant}/{name}", "path": str(sb.lib_dir / name)})
    for family in study_families(cfg):
        fam = ensure_family(family, models_dir=cfg.models_dir, families_file=config_families_file(cfg))
        for f in fam.all():
            out.append({"role": "model", "name": f"{fam.family}/{f.name}", "path": str(f.path)})
    for p in panels:
        out.append({"role": "panel", "name": p.name, "path": str(p.resolve())})
    return out


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class KeysEnsured:
    generated: keys.KeyPair | None  # the pair made now; None when it existed
    fingerprint: str  # of the public key copied


def ensure_keys(pub_out: Path) -> KeysEnsured:
    """Create the signing key pair once (outside the repository), refuse a private key with loose
    permissions, and copy the public key to ``pub_out``."""
    priv, pub = keys.default_private_key(), keys.default_public_key()
    kp = keys.generate() if not priv.exists() else None
    keys.load_private_key(priv)  # refuses a key with loose permissions
    pub_out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pub, pub_out)
    return KeysEnsured(kp, keys.public_fingerprint(pub))
