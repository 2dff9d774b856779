# Shared names. Rules call the refspec CLI and hold no logic of their own.
from pathlib import Path

RESULTS = config["results"]
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
PROV = f"{RESULTS}/provenance"
STAGE = f"{RESULTS}/stage"
ARCHIVE = f"{RESULTS}/archive"
CHECKED = f"{RESULTS}/checked.txt"
THREADS = config["threads"]

# the config file the CLI reads (the same one Snakemake validated)
CONFIGFILE = workflow.overwrite_configfiles[-1] if workflow.overwrite_configfiles else "config/config.yaml"
PATCHES = sorted(str(p) for p in Path("native/patches").glob("*.patch"))
PANEL = f"{RESULTS}/panels/{config['panel']['source']}.jsonl"
CAMPAIGNS = list(config["campaigns"]["run"])
# directories assembled into the archive: each campaign's folder (ready once its marker is)
# controlled stages (`refspec stage`): folder campaigns/<stage>, completion marker <stage>.done
STAGE_SLOTS = [s for s in ("audit", "replay", "partition", "crosses", "admission") if config["stages"][s]]
CAMPAIGN_DONE = [f"{RESULTS}/campaigns/{c}.done" for c in CAMPAIGNS + STAGE_SLOTS]
CAMPAIGN_DIRS = []
DEFINITIONS = config["campaigns"]["definitions"]
# the code the manifest pins: a change to any of it makes a new manifest (and the
# freeze check then refuses to resume a campaign begun under the old one)
SOURCES = sorted(
    str(p) for pattern in ("workflow/refspec/**/*.py", "report/**/*", "native/**/*", "config/**/*.yaml")
    for p in Path(".").glob(pattern) if p.is_file()
)
