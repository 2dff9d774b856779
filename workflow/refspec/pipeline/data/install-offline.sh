#!/usr/bin/env bash
# Install a refspec bundle on a host without network.
#
#   bash install-offline.sh [--prefix DIR] [--python PATH] [--verify-only]
#
# Checks every part and every file of the bundle against BUNDLE.json (sha256 and
# size) before installing anything: a missing or altered part is refused with exit 3
# and a message naming it. Then, under DIR (default: <bundle>/installed):
#   DIR/venv     virtual environment (pip --no-index --no-deps from the bundled wheels)
#   DIR/src      the project source; `refspec` runs from it
#   DIR/cache    REFSPEC_CACHE: downloads/ (pinned sdist, family wheel), native/<key>/
#   DIR/models   user-placed model files of the bundled family, if any
#   DIR/env.sh   `source DIR/env.sh` sets REFSPEC_CACHE and PATH
# A second run into the same DIR verifies the installed files and changes nothing.
# Exit codes: 0 done, 2 usage, 3 integrity (missing or altered part or file), 5 runtime.
# Needs only python3 (the bundle's target version) with its venv module.
set -euo pipefail
bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = "--python" ] && [ $((i + 1)) -lt ${#args[@]} ]; then py="${args[$((i + 1))]}"; fi
    case "${args[$i]}" in --python=*) py="${args[$i]#--python=}" ;; esac
done
if [ -z "$py" ]; then
    want="$(sed -n 's/^  "python": "\(3\.[0-9]*\)",$/\1/p' "$bundle/BUNDLE.json" 2>/dev/null | head -n1)"
    for cand in "python$want" python3; do
        if command -v "$cand" >/dev/null 2>&1; then py="$(command -v "$cand")"; break; fi
    done
fi
if [ -z "$py" ]; then
    echo "install-offline: no python3 found on PATH (pass --python PATH)" >&2
    exit 5
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$py" - "$bundle" "$py" "$@" <<'PYEOF'
import hashlib, json, os, shutil, subprocess, sys, tarfile, tempfile, time

EXIT_USAGE, EXIT_INTEGRITY, EXIT_RUNTIME = 2, 3, 5
FORMAT = "refspec-bundle/1"
CHUNK = 1 << 20
MARKER = ".refspec-install.json"
PARTIAL = ".refspec-install.partial"


def die(code, msg):
    print(f"install-offline: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def say(msg):
    print(f"install-offline: {msg}", file=sys.stderr, flush=True)


def sha256_stream(paths):
    h, n = hashlib.sha256(), 0
    for p in paths:
        with open(p, "rb") as f:
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                h.update(b)
                n += len(b)
    return h.hexdigest(), n


def parse(argv):
    opts = {"prefix": None, "python": None, "verify_only": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print("usage: bash install-offline.sh [--prefix DIR] [--python PATH] [--verify-only]")
            sys.exit(0)
        if a in ("--prefix", "--python"):
            if i + 1 >= len(argv):
                die(EXIT_USAGE, f"{a} needs a value")
            opts[a[2:]] = argv[i + 1]
            i += 2
        elif a.startswith(("--prefix=", "--python=")):
            k, v = a[2:].split("=", 1)
            opts[k] = v
            i += 1
        elif a == "--verify-only":
            opts["verify_only"] = True
            i += 1
        else:
            die(EXIT_USAGE, f"unknown argument {a!r} (see --help)")
    return opts


def dest_of(rel):
    """Where a bundle file goes under the prefix."""
    if rel.startswith("downloads/"):
        return os.path.join("cache", rel)
    if rel.startswith(("wheels/", "models/")):
        return rel
    return os.path.join(".bundle", rel)


def check_bundle(bundle, files):
    """Every part and file present with its size and sha256; nothing written."""
    for ent in files:
        parts = ent.get("parts")
        if parts:
            paths = []
            for part in parts:
                p = os.path.join(bundle, part["path"])
                if not os.path.isfile(p):
                    die(EXIT_INTEGRITY, f"part {part['path']} of {ent['path']} is missing")
                got, size = sha256_stream([p])
                if got != part["sha256"] or size != part["size"]:
                    die(EXIT_INTEGRITY, f"part {part['path']} of {ent['path']} is altered "
                                        f"(sha256 {got}, {size} bytes; expected {part['sha256']}, {part['size']} bytes)")
                paths.append(p)
            got, size = sha256_stream(paths)
            if got != ent["sha256"] or size != ent["size"]:
                die(EXIT_INTEGRITY, f"{ent['path']}: its reassembled parts do not match its sha256 {ent['sha256']}")
        else:
            p = os.path.join(bundle, ent["path"])
            if not os.path.isfile(p):
                die(EXIT_INTEGRITY, f"{ent['path']} is missing from the bundle")
            got, size = sha256_stream([p])
            if got != ent["sha256"] or size != ent["size"]:
                die(EXIT_INTEGRITY, f"{ent['path']} is altered (sha256 {got}; expected {ent['sha256']})")


def materialize(bundle, ent, dest):
    """Copy (or reassemble) one bundle file to ``dest`` and verify the result."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    srcs = [os.path.join(bundle, p["path"]) for p in ent["parts"]] if ent.get("parts") else \
        [os.path.join(bundle, ent["path"])]
    fd, tmp = tempfile.mkstemp(prefix=".part.", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "wb") as out:
            for s in srcs:
                with open(s, "rb") as f:
                    shutil.copyfileobj(f, out, CHUNK)
            out.flush()
            os.fsync(out.fileno())
        got, size = sha256_stream([tmp])
        if got != ent["sha256"] or size != ent["size"]:
            die(EXIT_INTEGRITY, f"{ent['path']}: the copy at {dest} does not match its sha256 {ent['sha256']}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def safe_extract(tar_path, dest, strip, record, rel_base):
    """Extract regular files, folders and in-tree symlinks; record each file's sha256."""
    with tarfile.open(tar_path) as tf:
        for m in tf.getmembers():
            name = m.name
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or not name.startswith(strip + "/") and name != strip:
                die(EXIT_INTEGRITY, f"{os.path.basename(tar_path)}: unsafe member {name!r}")
            rel = name[len(strip) + 1:] if name != strip else ""
            target = os.path.join(dest, rel) if rel else dest
            if m.isdir():
                os.makedirs(target, exist_ok=True)
            elif m.issym():
                if m.linkname.startswith("/") or ".." in m.linkname.split("/"):
                    die(EXIT_INTEGRITY, f"{os.path.basename(tar_path)}: unsafe link {name!r} -> {m.linkname!r}")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.lexists(target):
                    os.unlink(target)
                os.symlink(m.linkname, target)
            elif m.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                data = tf.extractfile(m).read()
                with open(target, "wb") as f:
                    f.write(data)
                os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)
                record[os.path.join(rel_base, rel)] = hashlib.sha256(data).hexdigest()
            else:
                die(EXIT_INTEGRITY, f"{os.path.basename(tar_path)}: unsupported member {name!r}")


def run(cmd, what, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        die(EXIT_RUNTIME, f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


def verify_installed(prefix, rec):
    for rel, want in sorted(rec["files"].items()):
        p = os.path.join(prefix, rel)
        if not os.path.isfile(p):
            die(EXIT_INTEGRITY, f"installed file {p} is missing (install into a fresh --prefix)")
        got, _ = sha256_stream([p])
        if got != want:
            die(EXIT_INTEGRITY, f"installed file {p} was altered (sha256 {got}; expected {want})")
    vpy = os.path.join(prefix, "venv", "bin", "python")
    out = run([vpy, "-c", "import refspec, sys; print(refspec.__file__)"], "importing refspec in the venv")
    if not out.strip().startswith(os.path.join(prefix, "src") + os.sep):
        die(EXIT_INTEGRITY, f"the venv imports refspec from {out.strip()}, not from {prefix}/src")


def check_omitted(vpy, omitted):
    code = (
        "import importlib, importlib.metadata as md, json, sys\n"
        "res = {}\n"
        "top = {}\n"
        "for mod, dists in md.packages_distributions().items():\n"
        "    for d in dists: top.setdefault(d.lower().replace('_', '-'), []).append(mod)\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        v = md.version(name)\n"
        "    except md.PackageNotFoundError:\n"
        "        res[name] = None; continue\n"
        "    mods = sorted(m for m in top.get(name.lower().replace('_', '-'), [name.lower()]) if not m.startswith('_')) or [name.lower()]\n"
        "    try:\n"
        "        importlib.import_module(mods[0]); res[name] = v\n"
        "    except Exception as e:\n"
        "        res[name] = None\n"
        "print(json.dumps(res))\n"
    )
    names = [o["name"] for o in omitted]
    found = json.loads(run([vpy, "-c", code, json.dumps(names)], "checking the omitted packages").strip().splitlines()[-1])
    for o in omitted:
        v = found.get(o["name"])
        if v is None:
            die(EXIT_RUNTIME, f"omitted package {o['name']} is not importable from the host's Python "
                              f"(the bundle expects the host to provide it; pinned {o['version']})")
        note = "" if v == o["version"] else f"  WARNING: differs from the pinned {o['version']}"
        say(f"host provides {o['name']} {v}{note}")


def main():
    bundle, py = sys.argv[1], sys.argv[2]
    opts = parse(sys.argv[3:])
    mpath = os.path.join(bundle, "BUNDLE.json")
    if not os.path.isfile(mpath):
        die(EXIT_INTEGRITY, f"{mpath} is missing: not a refspec bundle")
    with open(mpath, "rb") as f:
        mbytes = f.read()
    m = json.loads(mbytes)
    if m.get("format") != FORMAT:
        die(EXIT_USAGE, f"bundle format {m.get('format')!r} is not {FORMAT!r}")
    digest = hashlib.sha256(mbytes).hexdigest()
    prefix = os.path.abspath(opts["prefix"] or os.path.join(bundle, "installed"))
    t0 = time.monotonic()

    marker = os.path.join(prefix, MARKER)
    if not opts["verify_only"] and os.path.isfile(marker):
        with open(marker) as f:
            rec = json.load(f)
        if rec.get("bundle") != digest:
            die(EXIT_USAGE, f"{prefix} holds the install of another bundle; choose another --prefix")
        verify_installed(prefix, rec)
        say(f"{prefix}: already installed from this bundle; {len(rec['files'])} files verified, nothing to do")
        return 0

    say(f"verifying {len(m['files'])} files ({sum(len(e.get('parts', [])) for e in m['files'])} parts)")
    check_bundle(bundle, m["files"])
    if opts["verify_only"]:
        with tempfile.TemporaryDirectory() as tmp:
            for ent in m["files"]:
                if ent.get("parts"):
                    materialize(bundle, ent, os.path.join(tmp, os.path.basename(ent["path"])))
        say("every part and file matches BUNDLE.json")
        return 0

    vv = run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], f"running {py}").strip()
    if vv != m["python"]:
        die(EXIT_USAGE, f"{py} is Python {vv}; this bundle is for Python {m['python']} (pass --python PATH)")

    if os.path.isdir(prefix) and os.listdir(prefix) and not os.path.exists(os.path.join(prefix, PARTIAL)):
        die(EXIT_USAGE, f"{prefix} exists, is not empty and holds no install of this bundle; choose another --prefix")
    os.makedirs(prefix, exist_ok=True)
    open(os.path.join(prefix, PARTIAL), "w").close()
    for d in ("venv", "src", "wheels", ".bundle", "models"):  # leftovers of an interrupted install
        shutil.rmtree(os.path.join(prefix, d), ignore_errors=True)

    installed = {}
    say(f"copying the bundle's files into {prefix}")
    for ent in m["files"]:
        rel = dest_of(ent["path"])
        materialize(bundle, ent, os.path.join(prefix, rel))
        if not rel.startswith(".bundle/"):
            installed[rel] = ent["sha256"]

    vdir = os.path.join(prefix, "venv")
    say(f"creating the venv {vdir} ({'with' if m['omit'] else 'without'} the host's site-packages)")
    venv_cmd = [py, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if m["omit"] else []) + [vdir]
    run(venv_cmd, "creating the venv")
    vpy = os.path.join(vdir, "bin", "python")
    if m["omit"] and sys.prefix != sys.base_prefix:
        # the host's python3 is itself a virtual environment: --system-site-packages reaches only
        # its base interpreter, so name the host venv's site folders (after the venv's own)
        vsite = run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    "locating the venv's site-packages").strip().splitlines()[-1]
        import site
        host_sites = [d for d in site.getsitepackages() if os.path.isdir(d)]
        with open(os.path.join(vsite, "refspec-host-site.pth"), "w") as f:
            f.write("".join(d + "\n" for d in host_sites))
        say(f"the host's python is a venv: its site folders {host_sites} follow the venv's own")
    wheels = [e["path"] for e in m["files"] if e["role"] in ("wheel", "pip")]
    pipwhl = [os.path.join(prefix, e["path"]) for e in m["files"] if e["role"] == "pip"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_NO_INDEX"] = "1"
    pipargs = ["--isolated", "install", "--no-index", "--no-deps", "--no-cache-dir", "--no-compile",
               "--disable-pip-version-check", "-q"]
    run([vpy, os.path.join(pipwhl, "pip"), *pipargs, pipwhl], "installing pip from its wheel", env=env)
    say(f"installing {len(wheels) - 1} wheels offline")
    run([vpy, "-m", "pip", *pipargs, *[os.path.join(prefix, w) for w in wheels if os.path.join(prefix, w) != pipwhl]],
        "installing the wheels", env=env)
    if m["omit"]:
        check_omitted(vpy, m["omit"])

    say("unpacking the project source")
    safe_extract(os.path.join(prefix, ".bundle", "project.tar"), os.path.join(prefix, "src"), "src", installed, "src")
    if m.get("native"):
        key = m["native"]["key"][:16]
        ndest = os.path.join(prefix, "cache", "native", key)
        shutil.rmtree(ndest, ignore_errors=True)
        say(f"unpacking the {m['native']['backend']} native build into {ndest}")
        safe_extract(os.path.join(prefix, ".bundle", m["native"]["file"]), ndest, key, installed,
                     os.path.join("cache", "native", key))
    shutil.rmtree(os.path.join(prefix, ".bundle"))

    purelib = run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "locating site-packages").strip()
    with open(os.path.join(purelib, "refspec-src.pth"), "w") as f:
        f.write("".join(os.path.join(prefix, "src", d) + "\n" for d in ("workflow", "report")))
    launcher = os.path.join(vdir, "bin", "refspec")
    with open(launcher, "w") as f:
        f.write(f"#!{vpy}\nimport sys\nfrom refspec.cli import main\nsys.exit(main())\n")
    os.chmod(launcher, 0o755)
    with open(os.path.join(prefix, "env.sh"), "w") as f:
        f.write("# source this file: refspec from the offline install\n"
                f"export REFSPEC_CACHE='{os.path.join(prefix, 'cache')}'\n"
                f"export VIRTUAL_ENV='{vdir}'\n"
                f"export PATH='{os.path.join(vdir, 'bin')}':\"$PATH\"\n")
    os.makedirs(os.path.join(prefix, "cache", "downloads"), exist_ok=True)

    run([launcher, "--help"], "running refspec from the venv")
    rec = {"bundle": digest, "python": vv, "created": m["created"], "files": installed}
    verify_installed(prefix, rec)
    tmp = marker + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    os.replace(tmp, marker)
    os.unlink(os.path.join(prefix, PARTIAL))
    say(f"installed in {time.monotonic() - t0:.1f} s: source {prefix}/env.sh, then cd {prefix}/src and run refspec")
    return 0


sys.exit(main())
PYEOF
