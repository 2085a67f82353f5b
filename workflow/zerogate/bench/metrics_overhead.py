"""Overhead of the metrics layer: zerogate's training loop with metrics on and off, interleaved.

    python -m zerogate.bench.metrics_overhead [--profile cpu-tiny] [--steps 60] [--repeats 2]

Prints two figures: the time spent inside the metrics layer as a share of the loop (measured in the
process, insensitive to machine noise), and the loop wall time with metrics on against off (noisy on a
shared machine). Target: at most 2 %.
"""

from __future__ import annotations


from zerogate.bench.common import launch, median, parse_and_prepare, summary


def main(argv: list[str] | None = None) -> int:
    args, workdir, paths = parse_and_prepare(__doc__, argv)
    on, off, inside = [], [], []
    for repeat in range(args.repeats):
        launch(paths, workdir / f"off-{repeat}", extra=["--no-metrics"])
        off.append(summary(workdir / f"off-{repeat}")["wall_time(s)"])
        launch(paths, workdir / f"on-{repeat}")
        run = summary(workdir / f"on-{repeat}")
        on.append(run["wall_time(s)"])
        inside.append(run["metrics_time(s)"] / run["wall_time(s)"])
    print(f"profile {args.profile}: {args.steps} steps x {args.repeats} repeats, interleaved; work in {workdir}")
    print(f"time inside the metrics layer: {100 * median(inside):.2f} % of the loop (rank 0)")
    print(f"loop wall time: metrics on {median(on):.2f} s, off {median(off):.2f} s: "
          f"overhead {100 * (median(on) / median(off) - 1):+.1f} % (target <= 2 %; noisy on a shared machine)")
    # The spread between runs of the same setting says how much of that difference is noise.
    print("  each run, in order: " + ", ".join(f"off {a:.2f} s / on {b:.2f} s" for a, b in zip(off, on)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
