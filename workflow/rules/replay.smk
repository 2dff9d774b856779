# Numerical replay (E1): capture attention operands of the live target, replay them
# in mq/pq/qb on the build's backend, compare stage outputs bitwise.


rule replay:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        directory(f"{RESULTS}/campaigns/replay"),
    log:
        f"{LOGS}/replay.log",
    benchmark:
        f"{BENCH}/replay.tsv"
    params:
        family=config["family"],
    threads: 1
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec replay --config {input.cfg} --family {params.family} --out {output} --threads {threads}"
        " --no-progress > {log} 2>&1"
