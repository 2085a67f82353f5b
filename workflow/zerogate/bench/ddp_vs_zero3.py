"""Step time of zerogate's ZeRO-3 configuration against plain PyTorch DDP, same model and data, one
invocation, runs interleaved so machine noise hits both alike.

    python -m zerogate.bench.ddp_vs_zero3 [--profile cpu-tiny] [--steps 60] [--repeats 2]

Prints the median optimizer-step time (slowest rank, warm-up excluded) of each and the ratio
ZeRO-3 / DDP (target at most 1.5 on the default profile), for the config as rendered (with the CPU
communication tuning of zerogate.plan.cpu_tuning) and without that tuning (the claim's overlap_comm, the
"auto" hidden_size^2 bucket rule, DeepSpeed's default leaf modules), i.e. the pipeline's step time after
and before the tuning. Two reference rows place the gap: the same rendered config at ZeRO stage 0 (the
DeepSpeed engine without partitioning) and at stage 2 with the optimizer offload (gradients reduced in
every micro-step, parameters never gathered), from zerogate.plan.variants.
"""

from __future__ import annotations


from zerogate.bench.common import launch, median, parse_and_prepare, timed_steps
from zerogate.plan.cpu_tuning import untuned_overrides
from zerogate.plan.ds_config import apply_overrides
from zerogate.io import read_json, write_json
from zerogate.plan.variants import variant_config


def main(argv: list[str] | None = None) -> int:
    args, workdir, paths = parse_and_prepare(__doc__, argv)
    untuned = {**paths, "ds_config": workdir / "ds_config_untuned.json"}
    hidden = read_json(paths["run_spec"])["model"]["hidden_size"]
    rendered = read_json(paths["ds_config"])
    write_json(untuned["ds_config"], apply_overrides(rendered, untuned_overrides(hidden)))
    references = {}
    for variant in ("zero0", "zero2-offload"):
        references[variant] = {**paths, "ds_config": workdir / f"ds_config_{variant}.json"}
        write_json(references[variant]["ds_config"], variant_config(rendered, variant)[0])
    runs = {"ddp": (paths, "zerogate.bench.ddp_worker"), "zero3_untuned": (untuned, "zerogate.train.loop"),
            "zero3": (paths, "zerogate.train.loop"), "zero0": (references["zero0"], "zerogate.train.loop"),
            "zero2-offload": (references["zero2-offload"], "zerogate.train.loop")}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(args.repeats):
        for name, (run_paths, module) in runs.items():
            launch(run_paths, workdir / f"{name}-{repeat}", module=module)
            times[name] += timed_steps(workdir / f"{name}-{repeat}")
    ddp, untuned_time, zero3, zero0, zero2 = (median(times[name]) for name in runs)
    print(f"profile {args.profile}: {args.steps} steps x {args.repeats} repeats, interleaved; work in {workdir}")
    print(f"DDP (torch DDP, gloo, no_sync accumulation)   median step {ddp:.4f} s  ({len(times['ddp'])} steps)")
    print(f"ZeRO-3, without zerogate.plan.cpu_tuning (before)  median step {untuned_time:.4f} s  ratio to DDP "
          f"{untuned_time / ddp:.2f}")
    print(f"ZeRO-3, config as rendered (after)            median step {zero3:.4f} s  ratio to DDP "
          f"{zero3 / ddp:.2f}  (target <= 1.5)")
    print(f"reference: DeepSpeed ZeRO-0 (no partitioning) median step {zero0:.4f} s  ratio to DDP {zero0 / ddp:.2f}")
    print(f"reference: ZeRO-2 + optimizer offload        median step {zero2:.4f} s  ratio to DDP {zero2 / ddp:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
