# The machine's fingerprint. It measures host peaks (copy bandwidth, fp32 matmul) on every core, so it runs
# with the host's thread count (Snakemake sets OMP_NUM_THREADS and friends to it; with one thread torch
# would measure one core) and holds the whole host share: no other job of this invocation runs beside it.
rule probe_hardware:
    output:
        fingerprint=result("probe/hardware.json"),
        summary=result("probe/summary.txt"),
    log:
        result("logs/probe_hardware.log"),
    conda:
        "../../envs/train.yaml"
    threads: host_cores()
    resources:
        host_share=HOST_SHARE_POOL,
    script:
        "../scripts/probe_hardware.py"
