rule native_build:
    output:
        f"{PROV}/BUILD.json",
    log:
        f"{LOGS}/native_build.log",
    benchmark:
        f"{BENCH}/native_build.tsv"
    threads: workflow.cores
    params:
        backend=config["native"]["backend"],
    shell:
        "refspec build --config {CONFIGFILE} --record {output} --jobs {threads} > {log} 2>&1"
