# Campaigns write their tables under campaigns/<name>/ and append to the run's ledger.
PANEL = f"{RESULTS}/panels/{config['panel']['source']}.jsonl"


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
    shell:
        "refspec audit --out {output} --threads {threads} > {log} 2>&1"
