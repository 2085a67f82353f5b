# The planner against setups other people published (zerogate.bench.planner_validation):
#   snakemake --cores 1 validate_planner                                   (config/published_setups/setups.yaml)
#   snakemake --cores 1 validate_planner --config published_setups=PATH    (a table of your own, same schema)
# Nothing is trained, probed or downloaded: each measured row's run is rendered and planned in-process for
# the hardware the row states, as plan_claimed_box plans the claimed box; estimator and paper rows go to
# the planner's DeepSpeed and paper columns. The table is checked whole (one line naming the file, the row
# and the key) while the workflow loads, its rows' model configs before any row is planned. The planner's own modules are inputs, so a changed planner
# re-judges the table. This machine's CPU grid (bench_planner_grid's JSON) is read where it is there (it is
# never run for this target: it trains); the summary line leads with the published runs. Results in
# results/planner_validation/<table's file stem>/; the table is also printed. Its helpers (the table, the
# planner's sources, the grid) are in common.smk. The published step times
# (config/published_setups/step_times.yaml) are judged against the step-time ledger after them
# (zerogate.bench.step_time_rows; printed, not in the JSON): first each row registered in
# docs/preregistered/*.predictions.yaml by the prediction committed before its figure was read (the
# independent check), then every row by the ledger as it stands, each marked independent or in-sample.
rule validate_planner:
    input:
        setups=published_setups_table,
        models=sorted(str(path.relative_to(REPO)) for path in (REPO / "config" / "models").glob("*.json")),
        planner=PLANNER_SOURCES,
        grid=planner_grid_if_run,
        step_times=STEP_TIMES_FILE,
        preregistered=registered_files(REPO),
    output:
        validation=f"{PLANNER_VALIDATION}/planner_validation.json",
        table=f"{PLANNER_VALIDATION}/planner_validation.txt",
    log:
        f"{PLANNER_VALIDATION}/validate_planner.log",
    localrule: True
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/validate_planner.py"
