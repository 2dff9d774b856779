#!/usr/bin/env bash
# The device check: one prepared run on a CUDA host with no network (tested: one H200, 16 cores).
#
#   bash tests/gpu/check.sh [--bundle DIR] [--prefix DIR] [--out DIR] [--jobs N] [--rehearse-on-cpu]
#
# From an offline bundle (refspec bundle; --bundle: the bundle folder, installed into --prefix,
# default: prefix= below) or from an environment where `refspec` already runs, it builds the
# patched llama.cpp for CUDA (cached by its inputs), derives the embedded family's files, and runs
# the workflow with tests/gpu/config.yaml: confirmation (R, M0, M3, C3, M_qh, C_qh, R_prod; 4 tasks, cap 128),
# implementation (qb/pq/gs/qh, target-only and speculative), replication (paired design, 8 sessions, with its A/A twin), E1
# replay on CUDA, seal, report and check, then the A/A coverage of E2's arms. Every layer is offloaded (gpu_layers auto on cuda) and
# the driver refuses to time a worker that holds fewer layers on the GPU than asked. It prints one
# summary block and leaves the sealed archive in --out (default results/gpu-check under the
# source). On a machine without a CUDA device it prints "no CUDA device: skipped" and exits 0.
# --rehearse-on-cpu runs the same steps on the CPU build (no layer offloaded) to rehearse the
# check where there is no GPU; its timings are CPU timings and its summary says so.
#
# Exit: 0 done (or skipped), 1 the workflow or the check failed, 2 usage, 3 bundle integrity,
# 4 build failed.
set -uo pipefail

bundle="" prefix="/tmp/refspec-gpu" out="" jobs="" rehearse=0  # abspath: the device host's install prefix (written, not an input)
while [ $# -gt 0 ]; do
    case "$1" in
        --bundle) bundle="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --rehearse-on-cpu) rehearse=1; shift ;;
        -h|--help) sed -n 2,17p "$0"; exit 0 ;;
        *) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ "$rehearse" -eq 0 ] && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
    echo "no CUDA device: skipped"
    exit 0
fi

t0=$(date +%s)
stamp() { echo "[check $(( $(date +%s) - t0 )) s] $*"; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

if [ -n "$bundle" ]; then
    stamp "installing the bundle $bundle into $prefix"
    bash "$bundle/install-offline.sh" --prefix "$prefix" || { rc=$?; echo "check.sh: bundle install failed (exit $rc)"; exit "$rc"; }
    # shellcheck disable=SC1091
    source "$prefix/env.sh"
    src="$prefix/src"
else
    src="$here"
fi
command -v refspec >/dev/null 2>&1 || { echo "check.sh: refspec is not on PATH (give --bundle)"; exit 2; }
cd "$src" || exit 2
jobs="${jobs:-$(nproc)}"
cfg="tests/gpu/config.yaml"
if [ "$rehearse" -eq 1 ]; then  # the same config on the CPU build, results in their own folder
    mkdir -p results
    python3 - "$cfg" results/gpu-check-rehearsal.yaml <<'PYEOF'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["native"]["backend"] = "cpu"
c["gpu_layers"] = "none"
c["threads"] = 2
c["results"] = "results/gpu-check-rehearsal"
open(sys.argv[2], "w").write(yaml.safe_dump(c))
PYEOF
    cfg="results/gpu-check-rehearsal.yaml"
    echo "REHEARSAL on the CPU build: no layer is offloaded; timings are CPU timings"
fi
results="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["results"])' "$cfg")"
logs="$src/$results-logs"
mkdir -p "$logs"
[ "$rehearse" -eq 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | sed 's/^/GPU: /'

stamp "building the patched llama.cpp for the configured backend ($jobs jobs)"
tb=$(date +%s)
refspec build --config "$cfg" --jobs "$jobs" --quiet > "$logs/build.log" 2>&1 || {
    rc=$?; tail -30 "$logs/build.log"; echo "check.sh: the CUDA build failed (exit $rc)"; exit 4; }
build_s=$(( $(date +%s) - tb ))
cat "$logs/build.log"
lib_dir="$(refspec build --config "$cfg" --quiet | sed -n 's/.*: \(\/.*\/bin\) (key.*/\1/p')"
# Some hosts' Python carries an older C++ runtime than the one the libraries were built with;
# loading the bindings then crashes in the tokenizer set-up. Preload the system's runtime.
if [ "$rehearse" -eq 0 ] && [ -z "${LD_PRELOAD:-}" ] && [ -f "$lib_dir/libllama.so" ]; then
    export LD_PRELOAD="$(ldd "$lib_dir/libllama.so" | awk '/libstdc\+\+/{print $3; exit}')"
    stamp "LD_PRELOAD=$LD_PRELOAD"
fi

stamp "deriving the family's files"
refspec models --config "$cfg" > "$logs/models.log" 2>&1 || { rc=$?; cat "$logs/models.log"; exit "$rc"; }

stamp "running the workflow (campaigns, replay, seal, report, check)"
PYTHONUNBUFFERED=1 refspec main --configfile "$cfg" --cores "$jobs" > "$logs/workflow.log" 2>&1
wrc=$?
tail -25 "$logs/workflow.log"
if [ "$wrc" -ne 0 ]; then
    for f in "$src/$results"/logs/*.log; do echo "--- $f"; tail -15 "$f"; done
fi

# the A/A coverage of E2's arms on this device (bench/aa_coverage.py): 10 replays of 3 processes,
# the twin of C_qb beside R, M_pq, M_qb and C_pq; a failure is reported, never the check's exit
if [ "$wrc" -eq 0 ] && [ "$rehearse" -eq 0 ]; then
    stamp "A/A coverage of E2's arms (10 replays of 3 processes)"
    rm -rf "$src/$results-aa"
    python3 bench/aa_coverage.py --out "$src/$results-aa" --config "$cfg" --recipes C_qb \
        --arms R,M_pq,M_qb,C_pq,C_qb --replays 10 --no-seal > "$logs/aa_coverage.log" 2>&1 \
        && sed -n '/^A\/A coverage/,$p' "$logs/aa_coverage.log" | grep -v '^    replay' \
        || { tail -15 "$logs/aa_coverage.log"; echo "check.sh: the A/A coverage bench failed (not the check)"; }
fi

archive="$src/$results/archive"
total_s=$(( $(date +%s) - t0 ))
if [ -d "$archive" ]; then
    python3 tests/gpu/summary.py "$archive" --build-seconds "$build_s" --total-seconds "$total_s"
fi
if [ -n "$out" ]; then  # one tar: the sealed archive, the check's logs and the rules' logs
    mkdir -p "$out"
    tar -C "$src" -cf "$out/gpu-check.tar" "$results/archive" "$results-logs" "$results/logs" \
        "$results/benchmarks" 2>/dev/null
fi
[ "$wrc" -eq 0 ] || { echo "check.sh: the workflow failed (exit $wrc)"; exit 1; }
stamp "done"
