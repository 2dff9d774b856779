rule models:
    input:
        f"{PROV}/BUILD.json",
    output:
        f"{PROV}/models.txt",
    log:
        f"{LOGS}/models.log",
    params:
        family=config["family"],
    shell:
        "refspec models --config {CONFIGFILE} --family {params.family} > {output} 2> {log}"


rule panel:
    output:
        f"{RESULTS}/panels/{{source}}.jsonl",
    log:
        f"{LOGS}/panel_{{source}}.log",
    params:
        tasks=config["panel"]["tasks"],
    shell:
        "refspec panel --source {wildcards.source} --tasks {params.tasks} --out {output} > {log} 2>&1"
