rule report:
    input:
        sealed=f"{RESULTS}/sealed-data",
        pub=f"{PROV}/signer.pub",
    output:
        directory(f"{RESULTS}/report-stage"),
    log:
        f"{LOGS}/report.log",
    benchmark:
        f"{BENCH}/report.tsv"
    conda:
        "../../envs/refspec.yaml"
    shell:
        "refspec report-stage --sealed {input.sealed} --pubkey {input.pub} --out {output} > {log} 2>&1"


rule seal_archive:
    input:
        stage=f"{RESULTS}/report-stage",
        previous=f"{RESULTS}/sealed-data",
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
        "refspec seal {input.stage} {output} --campaign default --previous {input.previous} --tar"
        " {params.reproduces} > {log} 2>&1"


rule check:
    # The signer is pinned by the key id of the key directory's public key (outside the results
    # and the archive), not by the signer.pub copy next to them; the archive must follow this
    # run's data seal, and the data seal must start the chain.
    input:
        archive=ARCHIVE,
        previous=f"{RESULTS}/sealed-data",
        pub=f"{PROV}/signer.pub",
    output:
        CHECKED,
    log:
        f"{LOGS}/check.log",
    conda:
        "../../envs/refspec.yaml"
    shell:
        "(keyid=$(refspec key-id) && prev=$(sha256sum {input.previous}/SEAL.dsse.json | cut -d' ' -f1)"
        " && refspec verify {input.previous} --pubkey {input.pub} --expect-keyid $keyid --expect-previous none"
        " && refspec verify {input.archive} --pubkey {input.pub} --expect-keyid $keyid --expect-previous $prev"
        " && python3 -I -S report/check.py {input.archive} --pubkey {input.pub} --expect-keyid $keyid"
        " --expect-previous $prev) > {log} 2>&1 && cp {log} {output}"
