# Assemble the run's tables into one staging folder and seal it; the report is rendered
# from the sealed data, added, and the archive sealed again (chained to the first seal).


rule keys:
    output:
        f"{PROV}/signer.pub",
    log:
        f"{LOGS}/keys.log",
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec keys-ensure --pub-out {output} > {log} 2>&1"


rule assemble:
    input:
        manifest=f"{PROV}/manifest.json",
        done=CAMPAIGN_DONE,
    output:
        directory(STAGE),
    log:
        f"{LOGS}/assemble.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        results=lambda wildcards, input: Path(input.manifest).parent.parent,
        campaigns=lambda wildcards, input: " ".join(
            f"--campaign {c}" for c in (d[: -len(".done")] for d in input.done)
        ),
    shell:
        "refspec assemble --results {params.results} --manifest {input.manifest} --out {output}"
        " {params.campaigns} > {log} 2>&1"


rule seal_data:
    input:
        stage=STAGE,
        pub=f"{PROV}/signer.pub",
    output:
        directory(f"{RESULTS}/sealed-data"),
    log:
        f"{LOGS}/seal_data.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        reproduces=SEAL_REPRODUCES,
    shell:
        "refspec seal {input.stage} {output} --campaign default {params.reproduces} > {log} 2>&1"
