# First, alone on the machine: it measures host peaks (copy bandwidth, matmul), and the planner that
# can refuse the run needs it before any other work starts.
rule probe_hardware:
    output:
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
        summary="results/{profile}/{machine}/probe/summary.txt",
    log:
        "results/{profile}/{machine}/logs/probe_hardware.log",
    threads: workflow.cores
    priority: 100
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/probe_hardware.py"
