# Several runs side by side: `snakemake --cores all compare`. The runs are config["compare"] (run
# directories) or, when empty, every results/*/*/registry.json present when the DAG is built.
rule compare_runs:
    input:
        unpack(compare_inputs),
    output:
        html=f"results/compare/comparison-{COMPARE_ID}.html",
        table=f"results/compare/comparison-{COMPARE_ID}.csv",
        loss=report(
            f"results/compare/comparison-{COMPARE_ID}-loss.png",
            caption="../report/compare_loss.rst",
            category="Comparison",
        ),
        step_time=report(
            f"results/compare/comparison-{COMPARE_ID}-step_time.png",
            caption="../report/compare_step_time.rst",
            category="Comparison",
        ),
        history=report(
            f"results/compare/comparison-{COMPARE_ID}-history.png",
            caption="../report/compare_history.rst",
            category="Comparison",
        ),
    log:
        f"results/compare/logs/compare_runs-{COMPARE_ID}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        # A machine id: ratios are to that machine's run of each group (empty: the group's first machine).
        reference=RUN_CONFIG.compare_reference,
    script:
        "../scripts/compare_runs.py"


rule compare:
    input:
        rules.compare_runs.output.html,
    localrule: True
