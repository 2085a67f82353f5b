# A plan of a model on a box, in one command (`make plan MODEL=... BOX=...`, or
#   snakemake --cores 1 plan_model --config model=qwen3-8b box=config/machines/<name>.yaml ...):
# the model's config.json and the box (a description or a short form) planned from the neutral base
# config/plan_base.yaml, no profile and no claim (zerogate.predict.model_plan). The request is read, and a
# bad argument refused in one line, while the DAG is built (plan_model's input); the plan lands in
# results/plans/<model>/<box>/<settings>/ and its answer is printed on the console each time.


rule plan_model_run:
    input:
        unpack(model_plan_inputs),
    output:
        plan="results/plans/{request}/plan.json",
        ds_config="results/plans/{request}/ds_config.json",
        answer="results/plans/{request}/answer.txt",
        summary="results/plans/{request}/plan.txt",
    log:
        "results/plans/{request}/plan_model.log",
    wildcard_constraints:
        request=r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+",
    conda:
        "../../envs/train.yaml"
    params:
        values=lambda wildcards: model_plan_request().values,
    script:
        "../scripts/plan_model.py"


# The target: the plan's answer, printed every time (a rule without output always runs).
rule plan_model:
    input:
        answer=lambda wildcards: f"{model_plan_dir()}/answer.txt",
    log:
        "results/plans/plan_model.log",
    localrule: True
    run:
        print(Path(input.answer).read_text(), end="")
