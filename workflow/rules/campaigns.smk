# Campaigns write their tables under campaigns/<name>/ and append to the run's ledger.


rule audit:
    input:
        f"{PROV}/BUILD.json",
    output:
        directory(f"{RESULTS}/campaigns/audit"),
    log:
        f"{LOGS}/audit.log",
    benchmark:
        f"{BENCH}/audit.tsv"
    threads: 1
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec audit --out {output} --threads {threads} > {log} 2>&1"
