# State formation and transfer (paper §6.1-6.2, S4-S5) and backend admission (§6.3, S6.3).
# Each stage writes its folder under campaigns/ and records its claim through `refspec claim`;
# the declared output is the completion marker beside the folder, so a failed control keeps
# its complete record (Snakemake never deletes the folder) and the claim is sealed as withheld.

_ST = CFG.state
_ADM = CFG.admission
_PS = preset_settings(CFG, "partition_screen")  # under campaigns.preset


rule partition_screen:
    # prefill only, output capacity one: the inputs where the partition arms' states differ
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        f"{RESULTS}/campaigns/partition_screen.done",
    log:
        f"{LOGS}/partition_screen.log",
    benchmark:
        f"{BENCH}/partition_screen.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        results=lambda wildcards, output: Path(output[0]).parent.parent,
        tasks=_PS.tasks,
        splits=",".join(
            str(s) for s in (_ST.splits if _PS.splits is None else _PS.splits)
        ),
        ub_sweep=",".join(str(u) for u in _PS.ub_sweep),
        pair="auto" if PS_PAIR else ",".join(_ST.pair),
        inputs=_PS.inputs,
        controls=_PS.controls,
    shell:
        "refspec state screen --config {input.cfg} --tasks {params.tasks} --splits={params.splits}"
        " --ub-sweep={params.ub_sweep} --pair {params.pair} --inputs {params.inputs}"
        " --controls {params.controls} --threads {threads} --no-progress"
        " --out {params.results}/campaigns/partition_screen > {log} 2>&1"
        " && cp {log} {output}"


rule state_partition:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
        screen=partition_screen_input(PS_TASKS),
    output:
        f"{RESULTS}/campaigns/partition.done",
    log:
        f"{LOGS}/state_partition.log",
    benchmark:
        f"{BENCH}/state_partition.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        results=lambda wildcards, output: Path(output[0]).parent.parent,
        tasks=lambda wildcards, output: (
            f"{partition_screen_dir(Path(output[0]).parent.parent)}/exposed-panel.jsonl"
            if PS_TASKS
            else _ST.tasks
        ),
        cap=_ST.cap,
        splits=",".join(str(s) for s in _ST.splits),
        ub_sweep=",".join(str(u) for u in _ST.ub_sweep),
        repeats=_ST.repeats,
    shell:
        "refspec claim partition --dir {params.results}/campaigns/partition --done {output} --results {params.results}"
        " -- state partition --config {input.cfg} --tasks {params.tasks} --cap {params.cap}"
        " --splits={params.splits} --ub-sweep={params.ub_sweep} --repeats {params.repeats} --threads {threads}"
        " --out {params.results}/campaigns/partition > {log} 2>&1"


rule state_crosses:
    input:
        partition=f"{RESULTS}/campaigns/partition.done",
        screen=partition_screen_input(PS_PAIR),
    output:
        f"{RESULTS}/campaigns/crosses.done",
    log:
        f"{LOGS}/state_crosses.log",
    benchmark:
        f"{BENCH}/state_crosses.tsv"
    conda:
        "../../envs/refspec.yaml"
    # independent job processes, one per core (each single-threaded)
    threads: 2
    params:
        results=lambda wildcards, output: Path(output[0]).parent.parent,
        pair=lambda wildcards, output: pair_option(Path(output[0]).parent.parent),
        divergent=_ST.divergent,
        stable=_ST.stable,
        repeats=_ST.cross_repeats,
        selectors=",".join(_ST.selectors or []),
    shell:
        "refspec claim crosses --dir {params.results}/campaigns/crosses --done {output} --results {params.results}"
        " -- state crosses --partition {params.results}/campaigns/partition {params.pair}"
        " --divergent {params.divergent} --stable {params.stable} --repeats {params.repeats} --jobs {threads}"
        " --selectors={params.selectors}"
        " --out {params.results}/campaigns/crosses > {log} 2>&1"


rule state_projection:
    input:
        cfg=CONFIGFILE,
        partition=f"{RESULTS}/campaigns/partition.done",
        screen=partition_screen_input(PS_PAIR),
    output:
        f"{RESULTS}/campaigns/projection.done",
    log:
        f"{LOGS}/state_projection.log",
    benchmark:
        f"{BENCH}/state_projection.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        results=lambda wildcards, output: Path(output[0]).parent.parent,
        pair=lambda wildcards, output: pair_option(Path(output[0]).parent.parent),
        layers=",".join(str(la) for la in _ST.projection_layers),
    shell:
        "refspec claim projection --dir {params.results}/campaigns/projection --done {output} --results {params.results}"
        " -- state projection --config {input.cfg} --partition {params.results}/campaigns/partition {params.pair}"
        " --layers {params.layers} --out {params.results}/campaigns/projection > {log} 2>&1"


rule admission:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        f"{RESULTS}/campaigns/admission.done",
    log:
        f"{LOGS}/admission.log",
    benchmark:
        f"{BENCH}/admission.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        results=lambda wildcards, output: Path(output[0]).parent.parent,
        backend=_ADM.backend,
        n_kv=_ADM.n_kv,
        queries=_ADM.queries,
    shell:
        "refspec claim admission --dir {params.results}/campaigns/admission --done {output} --results {params.results}"
        " -- admission --config {input.cfg} --backend {params.backend} --n-kv {params.n_kv} --queries {params.queries}"
        " --threads {threads} --out {params.results}/campaigns/admission > {log} 2>&1"
