rule models:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
    output:
        f"{PROV}/models.txt",
    log:
        f"{LOGS}/models.log",
    params:
        family=config["family"],
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec models --config {input.cfg} --family {params.family} > {output} 2> {log}"


rule panel:
    output:
        f"{RESULTS}/panels/{{source}}.jsonl",
    log:
        f"{LOGS}/panel_{{source}}.log",
    params:
        tasks=config["panel"]["tasks"],
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec panel --source {wildcards.source} --tasks {params.tasks} --out {output} > {log} 2>&1"
