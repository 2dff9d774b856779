# The seal chain (refspec.pipeline.seal_chain), one rule per step so that a run resumes between
# them: assemble the run's tables into one folder and seal it here; report.smk renders the report
# from the sealed data, seals the archive again (chained to the first seal) and checks it.


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
        directory(ASSEMBLED),
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
        assembled=ASSEMBLED,
        pub=f"{PROV}/signer.pub",
    output:
        directory(SEALED_DATA),
    log:
        f"{LOGS}/seal_data.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        reproduces=SEAL_REPRODUCES,
    shell:
        "refspec seal-data --assembled {input.assembled} --out {output} --campaign default"
        " {params.reproduces} > {log} 2>&1"
