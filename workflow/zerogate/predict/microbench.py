"""This machine measured for the run's shapes by micro-benchmarks (rule measure_microbenchmarks,
``plan/microbench.json`` [Microbench]), none of which builds or steps the run's model, so a time ledger
built on them predicts the run rather than replaying it.

- Matrix products: the three products of each linear layer's training step (forward, backward_input,
  backward_weight; zerogate.runtime.microbench.product_call) at the run's micro-batch x sequence length,
  the layers' widths read from the model's config on the meta device (zerogate.model.linear_shapes), in
  the run's dtype on the run's device with a rank's threads. On the CPU a product of more than
  ``CPU_PRODUCT_FLOP_CAP`` is timed on a slice of the layer (``timed_shape``: its largest dimension cut
  first, so that a vocabulary-wide head keeps the run's rows) and its seconds extrapolated at that rate, so
  a large model's shapes stay within the budget. On the CPU each call reads its operands from the next
  slice of a buffer as large as the operands of a step's products (``operand_pool_bytes``, at most
  ``COLD_POOL_BYTES``), as a step's products read each layer's own.
- Copies: one rank's partition in the run's dtype (capped at ``COPY_BYTES_CAP``), host to host, and on a
  GPU host to device and back, pinned and pageable.
- The optimizer's update over a buffer of one rank's partition (zerogate.predict.zero_states.rank_share;
  capped at ``UPDATE_NUMEL_CAP``): DeepSpeed's CPU Adam where its op is built in this environment
  (zerogate.runtime.ops), else torch's AdamW, and which; on a GPU also torch's fused AdamW on the device.
- The per-module and per-parameter cost of a micro-step on the host: a synthetic stack of tiny linear layers
  at two sizes (``MODULE_STACKS``) through a DeepSpeed engine from the run's ZeRO settings in a world of the
  run's ranks on the host (the processes timing at once, zerogate.predict.microbench_together; one on a GPU),
  the seconds blocked in its collectives taken out, and the same stacks in plain eager PyTorch, on the run's
  device (zerogate.runtime.module_overhead; on
  a GPU the stacks' kernels take microseconds, so what is timed is the host's hooks and launches); the
  ledger's line through the two sizes gives the engine's fixed cost per micro-step and its cost per module of
  one parameter, and the larger stack timed again with a bias on every layer (two parameters a module) the
  cost per parameter.
- The cost of one dispatched operator with autograd and of its memory traffic on the host (CPU accelerator
  only): chains of elementwise products at two lengths (``OPERATOR_CHAINS``), on a few elements and on a
  tensor of the run's activation size (micro-batch x sequence x hidden), and at ``LOGITS_CHAINS`` on one of
  its logits' size (micro-batch x sequence x vocabulary) where that is larger, both capped at
  ``TRAFFIC_NUMEL_CAP``: zerogate.runtime.operator_dispatch.
- Collectives: the probe's (probe/hardware.json, zerogate.runtime.collective_timing), carried, not timed
  again.

Each kind has a share of ``BUDGET_S``; each rate is the spread of 3 to 5 repeats
(zerogate.runtime.microbench). On the CPU accelerator the host's ranks share its cores and memory, so every
benchmark is timed by as many processes at once as the run has ranks on the host, in step, their repeats
pooled (zerogate.predict.microbench_together); this module times one process's share.
Imports torch: only zerogate.predict.microbench_files imports it, once the rank's environment
(DS_ACCELERATOR, thread counts) is set.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from zerogate.contracts.machine import Collectives
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.model.hf_config import shape_of
from zerogate.model.linear_shapes import LinearShape, linear_shapes
from zerogate.predict.setup import DTYPE_BYTES, TORCH_DTYPES, setup_from_config
from zerogate.predict.zero_states import rank_share
from zerogate.render.deepspeed_defaults import deepspeed_defaults
from zerogate.runtime import microbench as bench
from zerogate.runtime import module_overhead, operator_dispatch
from zerogate.runtime.collective_clock import CollectiveClock
from zerogate.runtime.launch import LocalWorld, one_rank_config, remove_own_shm_buffers, start_local_world
from zerogate.runtime.ops import EXTENSIONS_DIR_VARIABLE, build_env

# Seconds of timing per kind (the rule's process start, imports and warm-ups come on top): the products
# share theirs equally, the copies and updates theirs per route and implementation.
BUDGET_S = {"matmuls": 2.5, "copies": 0.5, "optimizer": 1.0, "modules": 4.5, "operators": 3.0}
# The operator chains' lengths (links): two, so the line through them separates the chain's fixed cost from
# the cost per link; assumed wide enough apart for the difference to stand above the repeats' noise.
OPERATOR_CHAINS = (4, 36)
# The logits-sized chain's lengths: shorter, since each link there moves more bytes than a whole short chain
# of the activation's (assumed: enough to stand above the noise, and within the budget at TRAFFIC_NUMEL_CAP).
LOGITS_CHAINS = (1, 4)
# Elements of the small chains: so few that the memory traffic is nothing beside the dispatch (assumed).
DISPATCH_NUMEL = 16
# At most this many elements in the activation-sized chains (assumed: 64 MiB in fp32, beyond any cache).
TRAFFIC_NUMEL_CAP = 16 * 1024**2
# The synthetic stacks' sizes (modules): two, so a line through them separates the fixed cost per micro-step
# from the cost per module; assumed wide enough apart for the difference to stand above the repeats' noise.
MODULE_STACKS = (4, 24)
# Parameters a module of the stacks at each size of MODULE_STACKS (the weight), and of the larger stack timed
# again (the weight and a bias): the difference over its modules is the cost per parameter.
ONE_PARAMETER, TWO_PARAMETERS = 1, 2
# The stacks' layers: width x width on the run's micro-batch x sequence rows, so small that the arithmetic
# is nothing beside the bookkeeping (assumed).
MODULE_WIDTH = 8
# A gradient accumulation longer than the timing: every timed micro-step is a non-boundary one, as all but
# one of the run's are (the boundary's work has terms of its own).
NO_BOUNDARY = 1_000_000
KINDS = ("forward", "backward_input", "backward_weight")
# Assumed: 4 GFLOP is about 0.1 s on one core of this machine (fp32 matmul ~40 GFLOP/s, the probe's
# measure_host); a larger product is timed on a slice of the layer (timed_shape). Not applied on a GPU, where
# the run's shapes take milliseconds.
CPU_PRODUCT_FLOP_CAP = 4e9
# At most this much buffer for the CPU products to cycle their operands through (``operand_pool_bytes``: the
# bytes a step's products read). Assumed: beyond the last-level cache of the hosts here (one development
# machine reports 480 MiB of L3 shared by its socket, an earlier one 32 MiB), as
# docs/diagnostics/diag_cold_products.py's 1.5 GB: a step that reads more finds its operands no less cold.
# Measured there: products on cycled operands 12-24 % slower than on the same ones (docs/measurements.md).
COLD_POOL_BYTES = 1024**3
POOLED = {"cpu": ", each call's operands the next slice of a step's operands (operand_pool_bytes)"}
COPY_BYTES_CAP = 256 * 1024**2  # assumed: beyond any last-level cache, a few tens of ms per copy
UPDATE_NUMEL_CAP = 32 * 1024**2  # assumed: 512 MiB of parameter, gradient and two states in fp32


def timed_shape(tokens: int, in_features: int, out_features: int, accelerator: str) -> tuple[int, int, int]:
    """(rows, in_features, out_features) to time a linear layer's products on: the run's, cut on the CPU
    where a product would exceed CPU_PRODUCT_FLOP_CAP. The largest dimension is cut first, down to the next
    largest, then the two largest together, then all three (never under 1), so the slice keeps the run's
    product as square as the cap allows: cutting the rows of a vocabulary-wide head instead would time a
    thin product (its weight gradient's inner dimension a few rows) at a fraction of the run's rate."""
    dims = [tokens, in_features, out_features]
    if accelerator != "cpu" or 2.0 * math.prod(dims) <= CPU_PRODUCT_FLOP_CAP:
        return tokens, in_features, out_features
    order = sorted(range(3), key=lambda i: -dims[i])
    for cut in (1, 2, 3):
        kept = math.prod(dims[i] for i in order[cut:])
        size = (CPU_PRODUCT_FLOP_CAP / (2.0 * kept)) ** (1.0 / cut)
        next_largest = dims[order[cut]] if cut < 3 else 1
        if size >= next_largest:
            for i in order[:cut]:
                dims[i] = max(1, math.floor(size))
            break
    return dims[0], dims[1], dims[2]


def operand_pool_bytes(shapes: list[LinearShape], tokens: int, element_bytes: int) -> int:
    """The bytes a step's products read on one rank, every layer of every shape once (its input, weight and
    output gradient on ``tokens`` rows), capped at COLD_POOL_BYTES."""
    per_layer = sum(
        s.count * (tokens * s.in_features + s.out_features * s.in_features + tokens * s.out_features)
        for s in shapes
    )
    return min(COLD_POOL_BYTES, per_layer * element_bytes)


def matmul_rows(
    shapes: list[LinearShape], tokens: int, dtype: torch.dtype, device: str, accelerator: str
) -> list[dict[str, Any]]:
    """Each shape's three products timed: the contract's ``matmuls`` rows. On the CPU each call's operands
    come from the next slice of a buffer of the bytes a step's products read (``operand_pool_bytes``;
    zerogate.runtime.microbench.product_call), as a step's products each read another layer's tensors, so
    a model whose operands fit in cache is timed warm and one whose operands do not, cold; on a GPU the same
    operands every call."""
    budget = BUDGET_S["matmuls"] / max(1, len(shapes) * len(KINDS))
    pool_bytes = operand_pool_bytes(shapes, tokens, dtype.itemsize)
    pool = bench.operand_pool(pool_bytes, dtype, device) if accelerator == "cpu" else None
    rows = []
    for shape in shapes:
        rows_timed, in_timed, out_timed = timed_shape(
            tokens, shape.in_features, shape.out_features, accelerator
        )
        for kind in KINDS:
            m, n, k = bench.product_dims(kind, tokens, shape.in_features, shape.out_features)
            call = bench.product_call(kind, rows_timed, in_timed, out_timed, dtype, device, pool)
            timed_flop = 2.0 * rows_timed * in_timed * out_timed
            spread = bench.spread_of(bench.rate_samples(call, timed_flop, budget, device))
            flop = 2.0 * m * n * k
            rows.append(
                {
                    "kind": kind,
                    "m": m,
                    "n": n,
                    "k": k,
                    "timed_rows": rows_timed,
                    "timed_in_features": in_timed,
                    "timed_out_features": out_timed,
                    "layers": list(shape.layers),
                    "count": shape.count,
                    "flop_per_call(flop)": flop,
                    "matmul_rate(flop/s)": spread,
                    "seconds_per_call(s)": flop / spread.median,
                }
            )
    return rows


def copy_rows(size_bytes: int, device: str) -> list[dict[str, Any]]:
    """Host to host, and with a GPU each direction pinned and pageable: the contract's ``copies`` rows."""
    routes: list[tuple[str, bool | None]] = [("host_to_host", None)]
    if device.startswith("cuda"):
        routes += [(r, p) for r in ("host_to_device", "device_to_host") for p in (True, False)]
    budget = BUDGET_S["copies"] / len(routes)
    return [
        {
            "route": route,
            "pinned": pinned,
            "size(bytes)": size_bytes,
            "copy_rate(bytes/s)": bench.spread_of(
                bench.rate_samples(
                    bench.copy_call(route, size_bytes, pinned, device), size_bytes, budget, device
                )
            ),
        }
        for route, pinned in routes
    ]


def cpu_adam_installed() -> bool:
    """Whether DeepSpeed was installed with its CPU Adam op prebuilt (DS_BUILD_CPU_ADAM)."""
    # Here, not at the top: DeepSpeed reads DS_ACCELERATOR (the run's, set by the rule) when imported.
    from deepspeed.git_version_info import installed_ops

    return bool(installed_ops.get("cpu_adam"))


def cpu_adam_built(installed: bool) -> tuple[bool, str]:
    """Whether DeepSpeed's CPU Adam loads here without a build (``installed`` with DeepSpeed, or built in
    this environment's directory by zerogate.runtime.ops), and why; loading an unbuilt op would compile it
    for minutes, so it is then not loaded."""
    directory = Path(build_env().get(EXTENSIONS_DIR_VARIABLE) or os.environ[EXTENSIONS_DIR_VARIABLE])
    if installed:
        return True, "DeepSpeed's CPU Adam op, installed with DeepSpeed"
    if (directory / "cpu_adam" / "cpu_adam.so").is_file():
        return True, f"DeepSpeed's CPU Adam op, built in {directory / 'cpu_adam'}"
    return False, (
        f"DeepSpeed's CPU Adam op is not built in {directory} (python -m zerogate.runtime.ops builds it, "
        "minutes): torch's AdamW timed instead"
    )


def optimizer_rows(
    partition: int, threads: int, device: str, cpu_adam: tuple[bool, str] | None = None
) -> list[dict[str, Any]]:
    """The host's update (DeepSpeed's CPU Adam where ``cpu_adam``, default :func:`cpu_adam_built`, says it
    loads, else torch's AdamW) and, with a GPU, torch's fused AdamW on it, over ``partition`` parameters
    (capped): the contract's ``optimizer`` rows."""
    numel = min(partition, UPDATE_NUMEL_CAP)
    built, why = cpu_adam if cpu_adam is not None else cpu_adam_built(cpu_adam_installed())
    chosen = [("deepspeed_cpu_adam" if built else "torch_adamw", "cpu", why)]
    if device.startswith("cuda"):
        chosen.append(("torch_adamw_fused", "cuda", "torch.optim.AdamW(fused=True) on the device"))
    budget = BUDGET_S["optimizer"] / len(chosen)
    rows = []
    for implementation, where, reason in chosen:
        try:
            call = bench.update_call(implementation, numel, device)
        except Exception as error:  # the op failed to load: torch's AdamW, and why
            reason = f"DeepSpeed's CPU Adam failed to load ({type(error).__name__}: {error}): torch's AdamW"
            implementation, call = "torch_adamw", bench.update_call("torch_adamw", numel, device)
        rows.append(
            {
                "implementation": implementation,
                "device": where,
                "why": reason,
                "parameters": numel,
                "partition_parameters": partition,
                "threads": threads,
                "update_rate(param/s)": bench.spread_of(
                    bench.rate_samples(call, numel, budget, "cpu" if where == "cpu" else device)
                ),
            }
        )
    return rows


def stack_config(ds_config: DsConfig, world: int = 1) -> dict[str, Any]:
    """The run's DeepSpeed config for the synthetic stacks in a world of ``world`` ranks: its ZeRO stage,
    offloads, buckets and optimizer as rendered, with an accumulation longer than the timing (NO_BOUNDARY),
    every parameter partitioned (persistence thresholds 0: each module fetches and releases its weight, as
    the run's larger parameters do) and no leaf module classes (the stack has none)."""
    config = one_rank_config(ds_config.raw)
    config["gradient_accumulation_steps"] = NO_BOUNDARY
    config["train_batch_size"] = config["train_micro_batch_size_per_gpu"] * NO_BOUNDARY * world
    zero = config.setdefault("zero_optimization", {})
    zero["stage3_param_persistence_threshold"] = 0
    zero["model_persistence_threshold"] = 0
    zero.pop("leaf_module", None)
    return config


def runs_zero3_linear(ds_config: DsConfig) -> bool:
    """Whether the run's modules call DeepSpeed's ``zero3_linear_wrap`` for ``torch.nn.functional.linear``:
    at ZeRO-3 with zero_optimization.memory_efficient_linear (absent: DeepSpeedZeroConfig's default,
    zerogate.render.deepspeed_defaults), which zero.Init installs (partition_parameters.py
    ``_enable_mem_efficient_linear``). The eager stacks time their layers with it, as the run's modules inside
    its leaf blocks run."""
    zero = ds_config.raw.get("zero_optimization") or {}
    default = deepspeed_defaults().memory_efficient_linear
    return ds_config.stage == 3 and bool(zero.get("memory_efficient_linear", default))


def stack_shapes(rows: int) -> list[module_overhead.StackShape]:
    """The stacks timed: each size of MODULE_STACKS with one parameter a module, and the largest with two."""
    return [
        module_overhead.StackShape(modules, MODULE_WIDTH, rows, ONE_PARAMETER) for modules in MODULE_STACKS
    ] + [module_overhead.StackShape(max(MODULE_STACKS), MODULE_WIDTH, rows, TWO_PARAMETERS)]


def module_overhead_rows(
    run_spec: RunSpec, ds_config: DsConfig, rows: int, device: str = "cpu", world: LocalWorld = LocalWorld()
) -> list[dict[str, Any]]:
    """The synthetic stacks of ``stack_shapes``, through the run's DeepSpeed engine and eagerly, on the run's
    device: the contract's ``module_overhead`` rows. Starts (and leaves) ``world`` with the run's backend,
    every rank of it timing the same stacks in step, the seconds its collectives block taken out of the
    engine's (zerogate.runtime.collective_clock, installed before the world starts)."""
    shapes = stack_shapes(rows)
    budget = BUDGET_S["modules"] / (2 * len(shapes))
    config = stack_config(ds_config, world.size)
    zero3_linear = runs_zero3_linear(ds_config)
    clock = CollectiveClock().install()
    port = start_local_world(run_spec.backend, world)
    timed = []
    try:
        for shape in shapes:
            through_engine = module_overhead.time_engine(config, shape, budget, clock)
            timed.append(("deepspeed", ds_config.stage, shape, through_engine))
            timed.append(
                ("eager", -1, shape, module_overhead.time_eager(shape, budget, zero3_linear, device))
            )
    finally:
        # DeepSpeed's shm comm buffers of this world outlive the process otherwise.
        remove_own_shm_buffers(port)
    return [
        {
            "engine": engine,
            "stage": stage,
            "modules": shape.modules,
            "width": shape.width,
            "rows": shape.rows,
            "parameters_per_module": shape.parameters_per_module,
            "micro_step_time(s)": spread,
            "world": world.size if engine == "deepspeed" else 1,
        }
        for engine, stage, shape, spread in timed
    ]


def operator_chain_rows(activation_numel: int, logits_numel: int, dtype: torch.dtype) -> list[dict[str, Any]]:
    """The operator chains: at each length of OPERATOR_CHAINS on DISPATCH_NUMEL elements and on
    ``activation_numel``, and at each of LOGITS_CHAINS on ``logits_numel`` where it is larger (both capped at
    TRAFFIC_NUMEL_CAP): the contract's ``operator_chains`` rows."""
    activation = max(DISPATCH_NUMEL + 1, min(activation_numel, TRAFFIC_NUMEL_CAP))
    logits = min(logits_numel, TRAFFIC_NUMEL_CAP)
    chains = [(numel, links) for numel in (DISPATCH_NUMEL, activation) for links in OPERATOR_CHAINS]
    if logits > activation:
        chains += [(logits, links) for links in LOGITS_CHAINS]
    budget = BUDGET_S["operators"] / len(chains)
    element_bytes = torch.empty((), dtype=dtype).element_size()
    return [
        {
            "links": links,
            "numel": numel,
            "element_bytes": element_bytes,
            "chain_time(s)": operator_dispatch.time_chain(links, numel, dtype, budget),
        }
        for numel, links in chains
    ]


def measure(
    run_spec: RunSpec,
    ds_config: DsConfig,
    collectives: Collectives | None,
    collectives_source: str,
    world: LocalWorld = LocalWorld(),
) -> Microbench:
    """Every micro-benchmark for the run's shapes, with a rank's threads, in this process (in step with the
    host's other ranks' processes where zerogate.predict.microbench_together runs it, the synthetic stacks'
    engines in ``world``, a world of those processes). ``seconds(s)`` and ``cpu_share`` cover the timing,
    not reading the model's shapes or looking DeepSpeed's op up."""
    threads = run_spec.threads_per_rank
    torch.set_num_threads(threads)
    device = "cuda:0" if run_spec.accelerator == "cuda" else "cpu"
    dtype = getattr(torch, TORCH_DTYPES[run_spec.dtype])
    config = planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len)
    micro_batch = ds_config.train_micro_batch_size_per_gpu
    tokens = micro_batch * run_spec.seq_len
    partition = rank_share(count_parameters(config), setup_from_config(ds_config, run_spec))
    copy_bytes = min(partition * DTYPE_BYTES[run_spec.dtype], COPY_BYTES_CAP)
    shapes, cpu_adam = linear_shapes(config), cpu_adam_built(cpu_adam_installed())
    started, cpu_started = time.perf_counter(), time.process_time()
    matmuls = matmul_rows(shapes, tokens, dtype, device, run_spec.accelerator)
    copies = copy_rows(copy_bytes, device)
    optimizer = optimizer_rows(partition, threads, device, cpu_adam)
    overhead = module_overhead_rows(run_spec, ds_config, tokens, device, world)
    shape = shape_of(config)
    activation_numel, logits_numel = tokens * shape.hidden_size, tokens * shape.vocab_size
    chains = operator_chain_rows(activation_numel, logits_numel, dtype) if device == "cpu" else []
    how = (
        f"plain tensors, no model built: each linear layer's three products on {micro_batch} x "
        f"{run_spec.seq_len} tokens in {run_spec.dtype} on {device}{POOLED.get(run_spec.accelerator, '')}; "
        f"copies of {copy_bytes} B; the "
        f"optimizer over {min(partition, UPDATE_NUMEL_CAP)} of a rank's {partition} parameters; "
        f"{threads} thread(s); per rate {bench.MIN_REPEATS}-{bench.REPEATS} repeats of about "
        f"{bench.REPEAT_S} s of back-to-back calls after a warm-up, median and quartiles"
        + (
            f"; stacks of {' and '.join(map(str, MODULE_STACKS))} {MODULE_WIDTH} x {MODULE_WIDTH} linear "
            f"layers without a bias, and of {max(MODULE_STACKS)} with one, through a ZeRO-{ds_config.stage} "
            f"engine (a world of {world.size} rank(s), its collectives' time taken out) and eagerly, a "
            "micro-step each"
            + (
                ", the eager layers calling DeepSpeed's zero3_linear_wrap as the run's"
                if runs_zero3_linear(ds_config)
                else ""
            )
            if overhead
            else ""
        )
        + (
            "; chains of elementwise products with their backward, "
            + ", ".join(f"{row['links']} links on {row['numel']} elements" for row in chains)
            if chains
            else ""
        )
    )
    seconds = time.perf_counter() - started
    return Microbench.of(
        {
            "accelerator": run_spec.accelerator,
            "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
            "dtype": run_spec.dtype,
            "threads": threads,
            "micro_batch": micro_batch,
            "seq_len": run_spec.seq_len,
            "matmuls": matmuls,
            "copies": copies,
            "optimizer": optimizer,
            "module_overhead": overhead,
            "operator_chains": chains,
            "collectives": collectives,
            "collectives_source": collectives_source,
            "how": how,
            "seconds(s)": round(seconds, 3),
            "cpu_share": round((time.process_time() - cpu_started) / (seconds * threads), 3),
        },
        "the micro-benchmarks",
    )
