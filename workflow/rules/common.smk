# Shared names and helpers. The rules call refspec commands for the work; this file only derives
# paths and inputs from the configuration, and its checks of the configuration raise clear errors.
import shlex
import sys
from pathlib import Path

# this clone's packages, refspec and the checker's refspec_check that it imports (./run puts them
# first on PYTHONPATH too)
sys.path[:0] = [
    str(Path(workflow.basedir) / "workflow"),
    str(Path(workflow.basedir) / "report"),
]
from refspec.provenance.manifest import source_paths
from refspec.campaigns.definitions import load_definition
from refspec.campaigns.sizing import goal_args
from refspec.core.config import config_of, preset_settings, study_families
from refspec.pipeline import seal_chain

# the configuration, resolved once (Snakemake validated it against the same schema)
CFG = config_of(config, "the workflow config")
RESULTS = CFG.results
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
PROV = f"{RESULTS}/provenance"
# the seal chain's folders, named by refspec.pipeline.seal_chain (a server qualification uses them too)
ASSEMBLED = f"{RESULTS}/{seal_chain.ASSEMBLED}"
SEALED_DATA = f"{RESULTS}/{seal_chain.SEALED_DATA}"
RENDERED = f"{RESULTS}/{seal_chain.RENDERED}"
ARCHIVE = f"{RESULTS}/{seal_chain.ARCHIVE}"
CHECKED = f"{RESULTS}/checked.txt"
THREADS = CFG.threads
# a reproduction of a sealed archive (refspec reproduce): both seals name it
REPRODUCES = CFG.reproduces
SEAL_REPRODUCES = (
    f"--reproduces-seal {REPRODUCES.seal_sha256} --reproduces-keyid {REPRODUCES.keyid}"
    f" --reproduces-archive-id {shlex.quote(REPRODUCES.archive_id)}"
    if REPRODUCES
    else ""
)

# the config file the CLI reads (the same one Snakemake validated)
CONFIGFILE = (
    workflow.overwrite_configfiles[-1]
    if workflow.overwrite_configfiles
    else "config/config.yaml"
)
PATCHES = sorted(str(p) for p in Path("native/patches").glob("*.patch"))
PANEL = f"{RESULTS}/panels/{CFG.panel.source}.jsonl"
CAMPAIGNS = list(CFG.campaigns.run)
# the families studied side by side (config `families`, default [family]); with several, each
# family's campaigns and replay live in campaigns/<family>/<name> (one archive, one report)
FAMILIES = list(study_families(CFG))
MULTI = len(FAMILIES) > 1
SLOTS = [f"{f}/{c}" if MULTI else c for f in FAMILIES for c in CAMPAIGNS]
REPLAY_SLOTS = (
    [f"{f}/replay" if MULTI else "replay" for f in FAMILIES]
    if CFG.stages.replay
    else []
)


def slot_family(slot):
    parts = Path(slot).parts
    return parts[0] if len(parts) > 1 else CFG.family


def slot_name(slot):
    return Path(slot).name


def results_of(done, slot):
    """The results folder of a completion marker RESULTS/campaigns/<slot>.done."""
    return str(Path(done).parents[len(Path(slot).parts)])


# directories assembled into the archive: each campaign's folder (ready once its marker is)
# controlled stages (`refspec claim`): folder campaigns/<slot>, completion marker <slot>.done
# the divergence screen of each family (its exposed panel: campaigns whose panel source is screen)
SCREEN_SLOTS = (
    [f"{f}/screen" if MULTI else "screen" for f in FAMILIES]
    if CFG.stages.screen
    else []
)
STAGE_SLOTS = (
    ["audit"] * bool(CFG.stages.audit)
    + SCREEN_SLOTS
    + ["partition_screen"] * bool(CFG.stages.partition_screen)
    + REPLAY_SLOTS
    + [
        s
        for s in ("partition", "crosses", "admission", "projection")
        if getattr(CFG.stages, s)
    ]
)
CAMPAIGN_DONE = [f"{RESULTS}/campaigns/{s}.done" for s in SLOTS + STAGE_SLOTS]
DEFINITIONS = CFG.campaigns.definitions


if CFG.stages.partition_screen and CFG.stages.partition and CFG.state.tasks != "screen":
    raise ValueError(
        "stages.partition_screen is on but state.tasks names inputs by hand: set state.tasks to screen"
    )


# state.tasks / state.pair 'screen': the partition study runs on the screen's frozen inputs and
# the crosses and projection on its pair (anc/state.md)
PS_TASKS = CFG.state.tasks == "screen"
PS_PAIR = CFG.state.pair == "screen"


def partition_screen_dir(results):
    return f"{results}/campaigns/partition_screen"


def pair_option(results):
    """The crosses' and projection's pair: the configured one, or the partition screen's."""
    if PS_PAIR:
        return f"--screen {partition_screen_dir(results)}"
    return "--pair " + ",".join(CFG.state.pair)


def partition_screen_input(used):
    """The partition screen's marker when a state stage reads its frozen choice (``used``)."""
    if not used:
        return []
    if not CFG.stages.partition_screen:
        raise ValueError(
            "state.tasks or state.pair is 'screen': turn stages.partition_screen on"
        )
    return [f"{RESULTS}/campaigns/partition_screen.done"]


def screen_input(slot):
    """The divergence screen's marker when the campaign's panel is the screen's exposed panel."""
    defn, _ = load_definition(
        slot_name(slot),
        CFG.campaigns.preset,
        f"{DEFINITIONS}/{slot_name(slot)}.yaml",
    )
    if (defn.get("panel") or {}).get("source") != "screen":
        return []
    screen = f"{slot_family(slot)}/screen" if MULTI else "screen"
    if screen not in SCREEN_SLOTS:
        raise ValueError(
            f"campaign {slot_name(slot)} confirms on the divergence screen's panel: turn stages.screen on"
        )
    return [f"{RESULTS}/campaigns/{screen}.done"]


# the code the manifest pins, the files its source digest hashes (refspec.provenance.manifest,
# SOURCE_ROOTS): a change to any of it makes a new manifest (and the freeze check then refuses
# to resume a campaign begun under the old one)
SOURCES = source_paths()
# the configuration files a run's config may read (its campaign definitions)
CONFIG_FILES = sorted(str(p) for p in Path("config").glob("**/*.yaml") if p.is_file())
