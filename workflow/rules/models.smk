rule models:
    input:
        build=f"{PROV}/BUILD.json",
    output:
        f"{PROV}/models.txt",
    log:
        f"{LOGS}/models.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        families=" ".join(FAMILIES),
        models_dir=CFG.models_dir or "",
        families_file=CFG.families_file,
        cfg=CONFIGFILE,
    shell:
        "(for f in {params.families}; do refspec models --config {params.cfg} --family $f"
        " --models-dir '{params.models_dir}' --families-file '{params.families_file}' || exit $?; done)"
        " > {output} 2> {log}"


rule panel:
    output:
        f"{RESULTS}/panels/{{source}}.jsonl",
    log:
        f"{LOGS}/panel_{{source}}.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        tasks=CFG.panel.tasks,
    shell:
        "refspec panel --source {wildcards.source} --tasks {params.tasks} --out {output} > {log} 2>&1"
