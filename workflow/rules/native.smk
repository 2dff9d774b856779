rule native_build:
    input:
        patches=PATCHES,
        # the record names the tools built from native/tools (refspec-replay, refspec-opreplay)
        tools=sorted(str(p) for p in Path("native/tools").iterdir() if p.is_file()),
    output:
        f"{PROV}/BUILD.json",
    log:
        f"{LOGS}/native_build.log",
    benchmark:
        f"{BENCH}/native_build.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: workflow.cores
    params:
        backend=CFG.native.backend,
        cuda_arch=CFG.native.cuda_arch,
    shell:
        "refspec build --backend {params.backend} --cuda-arch {params.cuda_arch} --record {output} --jobs {threads}"
        " > {log} 2>&1"
