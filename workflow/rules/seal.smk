# Assemble the run's tables into one staging folder, seal it, render the report
# from the sealed data, add it and seal again (the second seal chains to the first).
CAMPAIGN_DIRS = [f"{RESULTS}/campaigns/{c}" for c in ["audit"]]


rule keys:
    output:
        f"{PROV}/signer.pub",
    log:
        f"{LOGS}/keys.log",
    shell:
        "refspec keys-ensure --pub-out {output} > {log} 2>&1"


rule assemble:
    input:
        manifest=f"{PROV}/manifest.json",
        campaigns=CAMPAIGN_DIRS,
    output:
        directory(STAGE),
    log:
        f"{LOGS}/assemble.log",
    shell:
        "refspec assemble --results {RESULTS} --manifest {input.manifest} --out {output}"
        " $(printf -- '--campaign %s ' {input.campaigns}) > {log} 2>&1"


rule seal_data:
    input:
        stage=STAGE,
        pub=f"{PROV}/signer.pub",
    output:
        directory(f"{RESULTS}/sealed-data"),
    log:
        f"{LOGS}/seal_data.log",
    shell:
        "refspec seal {input.stage} {output} --campaign default > {log} 2>&1"
