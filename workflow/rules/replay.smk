# Numerical replay (E1): capture attention operands of the live target, replay them
# in mq/pq/qb on the build's backend, compare stage outputs bitwise. The declared output is
# the completion marker beside the folder: a failed control keeps its complete record and
# `refspec stage` seals the claim as withheld (Snakemake never deletes the folder).


rule replay:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        f"{RESULTS}/campaigns/replay.done",
    log:
        f"{LOGS}/replay.log",
    benchmark:
        f"{BENCH}/replay.tsv"
    params:
        family=config["family"],
        out=lambda wildcards, output: output[0][: -len(".done")],
        results=lambda wildcards, output: Path(output[0]).parent.parent,
    threads: 1
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec stage replay --dir {params.out} --done {output} --results {params.results}"
        " -- replay --config {input.cfg} --family {params.family} --out {params.out} --threads {threads}"
        " --no-progress > {log} 2>&1"
