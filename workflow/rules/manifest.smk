rule manifest:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
        panel=PANEL,
        sources=SOURCES,
        configs=CONFIG_FILES,
    output:
        listing=f"{PROV}/artifacts.json",
        manifest=f"{PROV}/manifest.json",
    log:
        f"{LOGS}/manifest.log",
    conda:
        "../../envs/refspec.yaml"
    shell:
        "(refspec artifacts --config {input.cfg} --build {input.build} --panel {input.panel} --out {output.listing}"
        " && refspec manifest --artifacts {output.listing} --config {input.cfg} -o {output.manifest}) > {log} 2>&1"
