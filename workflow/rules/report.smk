rule report:
    input:
        sealed_data=SEALED_DATA,
        pub=f"{PROV}/signer.pub",
    output:
        directory(RENDERED),
    log:
        f"{LOGS}/report.log",
    benchmark:
        f"{BENCH}/report.tsv"
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec render --sealed-data {input.sealed_data} --pubkey {input.pub} --out {output} > {log} 2>&1"


rule seal_archive:
    input:
        rendered=RENDERED,
        sealed_data=SEALED_DATA,
        pub=f"{PROV}/signer.pub",
    output:
        directory(ARCHIVE),
    log:
        f"{LOGS}/seal_archive.log",
    conda:
        "../../envs/refspec.yaml"
    params:
        reproduces=SEAL_REPRODUCES,
    shell:
        "refspec seal-archive --rendered {input.rendered} --sealed-data {input.sealed_data} --out {output}"
        " --campaign default --tar {params.reproduces} > {log} 2>&1"


rule check:
    # The signer is pinned by the key id of the key directory's public key (outside the results
    # and the archive; check-chain's default), not by the signer.pub copy next to them; the
    # archive must follow this run's data seal, and the data seal must start the chain; then
    # report/check.py checks the archive, isolated (python3 -I -S), with the same pins.
    input:
        archive=ARCHIVE,
        sealed_data=SEALED_DATA,
        pub=f"{PROV}/signer.pub",
    output:
        CHECKED,
    log:
        f"{LOGS}/check.log",
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec check-chain --archive {input.archive} --sealed-data {input.sealed_data} --pubkey {input.pub}"
        " > {log} 2>&1 && cp {log} {output}"
