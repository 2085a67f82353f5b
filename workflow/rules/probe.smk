rule probe_hardware:
    output:
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
    log:
        "results/{profile}/{machine}/logs/probe_hardware.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/probe_hardware.py"
