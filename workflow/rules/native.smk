rule native_build:
    input:
        cfg=CONFIGFILE,
        patches=PATCHES,
    output:
        f"{PROV}/BUILD.json",
    log:
        f"{LOGS}/native_build.log",
    benchmark:
        f"{BENCH}/native_build.tsv"
    threads: workflow.cores
    params:
        backend=config["native"]["backend"],
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec build --config {input.cfg} --record {output} --jobs {threads} > {log} 2>&1"
