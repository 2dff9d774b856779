rule manifest:
    input:
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
        panel=PANEL,
    output:
        listing=f"{PROV}/artifacts.json",
        manifest=f"{PROV}/manifest.json",
    log:
        f"{LOGS}/manifest.log",
    shell:
        "(refspec artifacts --config {CONFIGFILE} --build {input.build} --panel {input.panel} --out {output.listing}"
        " && refspec manifest --artifacts {output.listing} --config {CONFIGFILE} -o {output.manifest}) > {log} 2>&1"
