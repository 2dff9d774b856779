# Numerical replay (E1): capture attention operands of the live target, replay them
# in mq/pq/qb on the build's backend, compare stage outputs bitwise. The declared output is
# the completion marker beside the folder: a failed control keeps its complete record and
# `refspec claim` seals the claim as withheld (Snakemake never deletes the folder).


rule replay:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        f"{RESULTS}/campaigns/{{rslot}}.done",
    log:
        f"{LOGS}/{{rslot}}.log",
    benchmark:
        f"{BENCH}/{{rslot}}.tsv"
    wildcard_constraints:
        rslot="|".join(REPLAY_SLOTS) or "replay",
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        family=lambda wildcards: slot_family(wildcards.rslot),
        out=lambda wildcards, output: output[0][: -len(".done")],
        results=lambda wildcards, output: results_of(output[0], wildcards.rslot),
    shell:
        "refspec claim replay --dir {params.out} --done {output} --results {params.results}"
        " -- replay --config {input.cfg} --family {params.family} --out {params.out} --threads {threads}"
        " --no-progress > {log} 2>&1"
