"""This machine's rates, measured by micro-benchmarks that never build or step the run's model
(``plan/microbench.json``, rule measure_microbenchmarks; zerogate.predict.microbench): matrix products at
the shapes of the run's linear layers, memory copies, the optimizer's update over a buffer of one rank's
partition, and the collectives the probe measured. What a time ledger multiplies its work by.

Every rate is a :class:`Spread` of repeats (median and quartiles, zerogate.robust.quartiles); its unit is
in the key that holds it (``matmul_rate(flop/s)``, ``copy_rate(bytes/s)``, ``update_rate(param/s)``, and
the synthetic module stacks' ``micro_step_time(s)``, a time, not a rate).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.machine import Collectives
from zerogate.contracts.run import Dtype

# The three products of one linear layer's training step, y = x W^T (x: tokens x in, W: out x in):
# forward y = x W^T (m = tokens, k = in, n = out); backward_input dx = dy W (m = tokens, k = out, n = in);
# backward_weight dW = dy^T x (m = out, k = tokens, n = in). torch.nn.functional.linear's autograd
# formula (torch/csrc/autograd/FunctionsManual.cpp, and tools/autograd/derivatives.yaml: addmm / mm).
MatmulKind = Literal["forward", "backward_input", "backward_weight"]
CopyRoute = Literal["host_to_host", "host_to_device", "device_to_host"]
OptimizerImplementation = Literal["deepspeed_cpu_adam", "torch_adamw", "torch_adamw_fused"]


class Spread(Record):
    """One rate over its repeats: the median and the quartiles of the per-repeat rates
    (zerogate.robust.quartiles); the unit is the key's that holds it."""

    median: float
    q1: float  # 25th percentile of the repeats' rates
    q3: float  # 75th percentile
    samples: list[float]  # each repeat's rate, in the order measured
    # The median over the repeats of the process's CPU seconds over wall seconds x its threads: near 1 when
    # it had its cores, lower when other processes took turns on them (a shared machine; the rate is then
    # below what the machine does alone). On a GPU the host may spin while it waits. None: not recorded.
    cpu_share: float | None = None


class MatmulRate(Record):
    """One matrix product (m x k) @ (k x n) of a linear layer's training step, timed at the run's dtype on
    the run's device with a rank's threads."""

    kind: MatmulKind
    m: int
    n: int
    k: int
    # The layer's slice the product was timed on: rows (tokens; the run's micro-batch x sequence length) and
    # features, fewer where a CPU product would outlast the budget (zerogate.predict.microbench.timed_shape);
    # its rate then stands for the run's shape.
    timed_rows: int
    timed_in_features: int
    timed_out_features: int
    # The linear layers this product stands for (module names, layer indices folded into ``*``) and how
    # many modules of the model have it: each runs once per pass per micro-step.
    layers: list[str]
    count: int
    flop_per_call: float = Field(alias="flop_per_call(flop)")  # 2 m n k
    rate: Spread = Field(alias="matmul_rate(flop/s)")
    # flop_per_call / the median rate: the run's shape at the rate measured
    seconds_per_call: float = Field(alias="seconds_per_call(s)")


class CopyRate(Record):
    """A memory copy of ``size`` bytes: payload bytes per second (each byte read once and written once; the
    probe's ``memory_bandwidth_gbps`` counts both, so it is twice this figure for the same copy)."""

    route: CopyRoute
    pinned: bool | None  # the host buffer page-locked (None: host to host)
    size_bytes: int = Field(alias="size(bytes)")
    rate: Spread = Field(alias="copy_rate(bytes/s)")


class OptimizerRate(Record):
    """The optimizer's update over a buffer of one rank's partition (capped at ``parameters``), parameters
    updated per second: DeepSpeed's CPU Adam where its op loads, else torch's AdamW, and which (``why``)."""

    implementation: OptimizerImplementation
    device: Literal["cpu", "cuda"]
    why: str  # why this implementation: the op loaded, or the reason it did not
    parameters: int  # elements of the timed buffer
    partition_parameters: int  # elements of one rank's ZeRO-3 partition of the run's model
    threads: int
    rate: Spread = Field(alias="update_rate(param/s)")


class ModuleOverhead(Record):
    """One micro-step (forward, backward, and the engine's non-boundary step) of a synthetic stack of
    ``modules`` tiny linear layers (``width`` x ``width`` on ``rows`` rows, ``parameters_per_module`` each:
    the weight, and a bias where 2), timed with a rank's threads: through a DeepSpeed engine from the run's
    ZeRO settings in a world of ``world`` ranks (``engine`` ``deepspeed``: ZeRO-3's hooks per module, its
    fetch and release per parameter, the gradient hooks per parameter), or plain eager PyTorch (``eager``:
    each operator's dispatch and autograd's bookkeeping). Its arithmetic is negligible: what it times is the
    per-module and per-parameter cost a small model pays on the host (zerogate.runtime.module_overhead).
    The time is the host's outside torch.distributed collectives (zerogate.runtime.collective_clock), which
    the ledger prices as terms of their own."""

    engine: Literal["deepspeed", "eager"]
    stage: int  # the ZeRO stage the engine ran (the run's); the eager stack's: -1
    modules: int
    width: int
    rows: int
    time: Spread = Field(alias="micro_step_time(s)")  # seconds per micro-step, over the repeats
    # 1: the weight alone; 2: the weight and a bias (files written before the biased stack was timed: 1).
    parameters_per_module: Literal[1, 2] = 1
    # Ranks of the world the engine ran in: the run's ranks on the host on the CPU accelerator, else 1 (files
    # written before the stacks ran in the run's world, their collectives' time still in: 1).
    world: int = Field(1, ge=1)


# ATen ops one link of an operator chain dispatches: its forward's mul and its backward's
# (zerogate.runtime.operator_dispatch; a test counts them).
OPS_PER_LINK = 2


class OperatorChain(Record):
    """One forward and backward of a chain of ``links`` elementwise products by a scalar on ``numel``
    elements in the run's dtype (zerogate.runtime.operator_dispatch: two ATen ops per link, each reading and
    writing ``numel`` elements), timed with a rank's threads."""

    links: int
    numel: int
    element_bytes: int
    time: Spread = Field(alias="chain_time(s)")  # seconds per forward and backward, over the repeats


class Microbench(Artefact):
    """This machine's rates for the run's shapes, none of them from the run's model being built or
    stepped."""

    CONTRACT = "microbench"

    accelerator: Literal["cpu", "cuda"]
    device: str  # "cpu" or the GPU's name
    dtype: Dtype  # the products' dtype: the run's
    threads: int  # torch's intra-op threads while timing: a rank's (the run spec's thread count)
    # Processes that timed every benchmark at once, each with a rank's threads: the run's ranks on this host
    # on the CPU accelerator, where they share its cores and memory (zerogate.predict.microbench_together);
    # every spread pools their repeats. 1: one process alone (on a GPU, or a file written before).
    ranks_at_once: int = 1
    micro_batch: int
    seq_len: int
    matmuls: list[MatmulRate]
    copies: list[CopyRate]
    optimizer: list[OptimizerRate]
    # The probe's collectives between two ranks, not measured again: ``collectives_source`` names the file.
    collectives: Collectives | None
    collectives_source: str
    how: str
    seconds_s: float = Field(alias="seconds(s)")  # wall time of the whole measurement
    # The process's CPU seconds over wall seconds x threads while it timed: near 1 when it had its cores,
    # well below when other processes took turns on them (a shared machine), its rates then lower than the
    # machine's. Timed by several processes at once: the median of every rate's share, over their timed
    # repeats. None: not recorded.
    cpu_share: float | None = None
    # The per-module and per-parameter cost of a micro-step on the host (zerogate.predict.microbench.
    # module_overhead_rows): each engine at two stack sizes of one parameter a module, and at the larger size
    # with two, on the run's device (on a GPU the host's hooks and launches: the stacks' kernels are
    # microseconds). Empty: not measured (a file written before it was).
    module_overhead: list[ModuleOverhead] = []
    # The cost of a dispatched operator and of its memory traffic on the host (zerogate.predict.microbench.
    # operator_chain_rows): chains at two lengths, on a few elements, at the run's activation size and at its
    # logits' size. Empty: not measured (a file written before it was, or on a GPU).
    operator_chains: list[OperatorChain] = []
