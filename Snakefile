# refspec: reference-preserving speculative decoding, measured and sealed.
# Thin by design: configuration, its validation, and one rule file per stage.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, schema="workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/native.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/campaigns.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/state.smk"
include: "workflow/rules/manifest.smk"
include: "workflow/rules/seal.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        CHECKED,
