"""A plan's answer on the console (the plan_model target): fits or not and which check decides, the largest
micro-batch, memory per rank and per host with each need's interval and three-valued verdict, the predicted
step time beside its floor, and each suggestion with the command that plans it. Reads the plan contract (and
the rendered DeepSpeed config, for the global batch) only: every figure is the planner's; nothing is
computed here."""

from __future__ import annotations

from zerogate.contracts.plan import FITS, MemoryCheck, Plan, Suggestion
from zerogate.contracts.run import DsConfig
from zerogate.predict.step_time_text import change_step, interval_line
from zerogate.units import format_bytes

SCHEMES = {
    "ddp": "DDP (no ZeRO)",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero2_offload_optimizer": "ZeRO-2 with optimizer offload",
    "zero3": "ZeRO-3 without offload",
    "zero3_offload_optimizer": "ZeRO-3 with optimizer offload",
    "zero3_offload_all": "ZeRO-3 with optimizer and parameter offload",
}


def _check(check: MemoryCheck) -> str:
    where = f"rank {check.rank} {check.device}" if check.rank is not None else check.device
    verdict = check.verdict or ("fits" if check.fits else "does not fit")
    if not check.fits:
        verdict += f", short by {format_bytes(-check.headroom_bytes)}"
    low, high = check.need_low_bytes, check.need_high_bytes
    interval = (
        f" (between {format_bytes(low)} and {format_bytes(high)})"
        if low is not None and high is not None and low != high
        else ""
    )
    return (
        f"{check.what}, {where}: needs {format_bytes(check.need_bytes)}{interval} of "
        f"{format_bytes(check.capacity_bytes)}: {verdict}"
    )


def head_lines(plan: Plan, ds_config: DsConfig) -> list[str]:
    """What was planned: model, box, scheme, geometry."""
    led = plan.ledger
    return [
        f"plan: {plan.profile} ({plan.machine_source} box)",
        f"  {led.parameters:,} parameters; {SCHEMES.get(plan.scheme, plan.scheme)}; {plan.ranks} ranks on "
        f"{plan.nodes} node(s); {plan.dtype}",
        f"  micro-batch {ds_config.train_micro_batch_size_per_gpu} x accumulation "
        f"{ds_config.gradient_accumulation_steps} x {plan.ranks} ranks = global batch "
        f"{ds_config.train_batch_size}; sequence {led.seq_len}; {led.attention} attention; activation "
        f"checkpointing {'on' if led.activation_checkpointing else 'off'}",
    ]


def answer_lines(plan: Plan) -> list[str]:
    """Fits or not, why, and the figures behind it."""
    failing = [c for c in plan.checks if not c.fits]
    uncertain = [c for c in plan.checks if c.fits and c.verdict not in (None, FITS)]
    if failing:
        lines = [f"answer: DOES NOT FIT ({', '.join(dict.fromkeys(c.what for c in failing))} too small)"]
    elif uncertain:
        what = ", ".join(dict.fromkeys(c.what for c in uncertain))
        lines = [f"answer: MAY NOT FIT ({what}: the capacity lies inside the need's interval)"]
    else:
        decide = plan.deciding_check
        lines = [f"answer: FITS (tightest: {decide.what}, headroom {format_bytes(decide.headroom_bytes)})"]
    lines += [f"  {_check(c)}" for c in plan.checks]
    if not any(c.what == "host RAM" for c in plan.checks):
        own = plan.ledger.own.zerogate
        lines.append(f"  host RAM: needs {format_bytes(own.host_per_node_bytes)} per node (not checked)")
    lines += [f"  note: {note}" for note in plan.notes]
    largest = plan.largest_micro_batch_per_rank
    sure, may = plan.largest_micro_batch_fits_per_rank, plan.largest_micro_batch_may_fit_per_rank
    if sure is None or may is None:
        lines.append(f"  largest micro-batch per rank that fits: {largest or 'none (not even 1)'}")
    else:
        lines.append(
            f"  largest micro-batch per rank: fits up to {sure or 'none'}, may fit up to {may or 'none'} "
            f"(the point need fits up to {largest or 'none'})"
        )
    steps = plan.floor
    micro, step = steps.micro_step_floor_s, steps.optimizer_step_floor_s
    lines.append(
        "  step-time floor (no step can be faster): micro-step "
        f"{'n/a' if micro is None else f'{micro:.3f} s'}, "
        f"optimizer step {'n/a' if step is None else f'{step:.3f} s'}"
        + (f"; left out for lack of a figure: {'; '.join(steps.missing)}" if steps.missing else "")
    )
    lines.append(f"  {interval_line(plan.step_time, steps)}")
    # Which peak each card's compute term used: the description's own figure or the card catalogue's.
    for source in dict.fromkeys(r.peak_source for r in steps.ranks if r.peak_source):
        lines.append(f"  peak used: {source}")
    return lines


def _need(s: Suggestion) -> str:
    """A change's effect: the smallest device's, the host's and NVMe's need after it, and the optimizer
    step it leaves."""
    parts = []
    if s.smallest_device_need_bytes is not None:
        parts.append(f"device {format_bytes(s.smallest_device_need_bytes)} per rank")
    if s.host_need_bytes is not None:
        parts.append(f"host {format_bytes(s.host_need_bytes)}")
    if s.nvme_need_bytes:
        parts.append(f"NVMe {format_bytes(s.nvme_need_bytes)} per node")
    if step := change_step(s):
        parts.append(step)
    return ", ".join(parts)


def change_lines(title: str, changes: list[Suggestion]) -> list[str]:
    """Each change with its effect, whether the run then fits, and its command; of the changes no make plan
    argument expresses (more nodes), only the first, with how many more plan.txt lists."""
    commanded = [s for s in changes if s.command]
    others = [s for s in changes if not s.command]
    if not changes:
        return []
    lines = [title]
    for s in commanded:
        lines.append(f"  - {s.change}: {_need(s)}; {_verdict(s)}")
        lines.append(f"      {s.command}")
    pinned = [s for s in others if s.settings.pin_memory is not None]
    for s in pinned:
        lines.append(f"  - {s.change}: {_need(s)}; {_verdict(s)}")
        lines.append(
            "      (not a make plan argument: zero_optimization.offload_optimizer / offload_param "
            ".pin_memory in a profile)"
        )
    bound = [s for s in others if s.settings.bind_cores is not None]
    for s in bound:
        lines.append(f"  - {s.change}: {_need(s)}; {_verdict(s)}")
        lines.append("      (not a make plan argument: DeepSpeed's launcher flag --bind_cores_to_rank)")
    others = [s for s in others if s.settings.pin_memory is None and s.settings.bind_cores is None]
    if others:
        first = others[0]
        more = f" (and {len(others) - 1} more such in plan.txt)" if len(others) > 1 else ""
        lines.append(
            f"  - on more nodes (docs/cluster.md; not a make plan argument): {first.change}: {_need(first)}; "
            f"{_verdict(first)}{more}"
        )
    return lines


def _verdict(s: Suggestion) -> str:
    return "fits" if s.fits else f"still does not fit ({s.tightest})"


def answer(plan: Plan, ds_config: DsConfig, files: list[str] | None = None) -> str:
    """The console answer of ``plan`` (rendered as ``ds_config``); ``files``: where the plan was written."""
    lines = head_lines(plan, ds_config) + answer_lines(plan)
    host_fails = any(not c.fits for c in plan.checks if c.rank is None)
    device_fails = any(not c.fits for c in plan.device_checks)
    if host_fails:
        lines += change_lines("what would make the host fit:", plan.host_changes)
    lines += change_lines("changes that make the run fit:", plan.suggestions)
    if device_fails:
        lines += change_lines("changes that lower the device need:", plan.device_changes)
    lines += change_lines("changes that keep the run fitting and change its step:", plan.time_changes)
    if not plan.fits and not plan.suggestions:
        lines.append("no single change considered makes the whole run fit")
    if files:
        lines.append("written: " + ", ".join(files))
    return "\n".join(lines)
