# Campaigns write their tables, plan, journal and ledger under campaigns/<name>/ and
# pin their ledger head in the run's ledger. The declared output is a completion
# marker beside that folder, so an interrupted campaign keeps everything it completed
# (Snakemake never deletes the folder) and resumes from its journal on the next run.


rule campaign:
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
        manifest=f"{PROV}/manifest.json",
        definition=lambda wildcards: f"{DEFINITIONS}/{slot_name(wildcards.name)}.yaml",
        screen=lambda wildcards: screen_input(wildcards.name),
    output:
        f"{RESULTS}/campaigns/{{name}}.done",
    log:
        f"{LOGS}/campaign_{{name}}.log",
    benchmark:
        f"{BENCH}/campaign_{{name}}.tsv"
    wildcard_constraints:
        name="|".join(SLOTS),
    conda:
        "../../envs/refspec.yaml"
    # timed campaigns run alone on the machine: nothing else shares its cores
    threads: workflow.cores
    params:
        results=lambda wildcards, output: results_of(output[0], wildcards.name),
        campaign=lambda wildcards: slot_name(wildcards.name),
        family=lambda wildcards: (
            f"--family {slot_family(wildcards.name)}" if MULTI else ""
        ),
        preset=CFG.campaigns.preset,
        threads=THREADS,
        # the run's target and budget (refspec main --target/--budget), this campaign's share
        goal=lambda wildcards: goal_args(CFG, slot_name(wildcards.name)),
    shell:
        "refspec campaign {params.campaign} {params.family} --config {input.cfg}"
        " --definition {input.definition}{params.goal}"
        " --out {params.results} --preset {params.preset}"
        " --threads {params.threads} --manifest {input.manifest} --resume --no-progress > {log} 2>&1"
        " && cp {log} {output}"


rule audit:
    # the marker beside campaigns/audit is the output: a failed control keeps the folder
    input:
        build=f"{PROV}/BUILD.json",
        cfg=CONFIGFILE,
    output:
        f"{RESULTS}/campaigns/audit.done",
    log:
        f"{LOGS}/audit.log",
    benchmark:
        f"{BENCH}/audit.tsv"
    conda:
        "../../envs/refspec.yaml"
    threads: 1
    params:
        out=lambda wildcards, output: output[0][: -len(".done")],
        results=lambda wildcards, output: Path(output[0]).parent.parent,
    shell:
        "refspec claim audit --dir {params.out} --done {output} --results {params.results}"
        " -- audit --config {input.cfg} --out {params.out} --threads {threads} > {log} 2>&1"


rule divergence_screen:
    # R decodes the discovery panel; the unrepaired arms run on its tasks by R's smallest margin
    # until enough diverge (anc/screen.md); the frozen exposed panel is read by the campaigns
    input:
        cfg=CONFIGFILE,
        build=f"{PROV}/BUILD.json",
        models=f"{PROV}/models.txt",
    output:
        f"{RESULTS}/campaigns/{{slot}}.done",
    log:
        f"{LOGS}/{{slot}}.log",
    benchmark:
        f"{BENCH}/{{slot}}.tsv"
    wildcard_constraints:
        slot="|".join(SCREEN_SLOTS) if SCREEN_SLOTS else "(?!)",
    conda:
        "../../envs/refspec.yaml"
    # untimed (it compares endpoints, never times them): it shares the machine with the other
    # untimed stages, while every timed campaign still runs alone; its arms keep the config's threads
    threads: 1
    params:
        results=lambda wildcards, output: results_of(output[0], wildcards.slot),
        family=lambda wildcards: (
            f"--family {slot_family(wildcards.slot)}" if MULTI else ""
        ),
    shell:
        "refspec screen --config {input.cfg} {params.family} --no-progress"
        " --out {params.results}/campaigns/{wildcards.slot} > {log} 2>&1"
        " && cp {log} {output}"
