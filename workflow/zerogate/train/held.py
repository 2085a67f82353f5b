"""What each rank actually holds after training: the partitioned model-state tensors of a DeepSpeed engine
(or of a torch engine: its module and optimizer, FSDP2's shards counted by their local part).

Read by ``zerogate.train.loop`` at the end of the run and compared with the ledger's prediction
(``zerogate.analysis.ledger_check``). Only tensors DeepSpeed keeps for the whole run are counted: the rank's
parameter partitions, its fp32 master partitions (when they are a separate copy), its gradient
partitions and the optimizer's state. Sizes are bytes; each storage is counted once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zerogate.runtime.deepspeed_adapter import parameter_count


def _local(tensor: Any) -> Any:
    """This rank's part of a tensor: FSDP2 keeps parameters, gradients and optimizer state as DTensors, whose
    local shard is what the rank holds."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _bytes(tensors: Iterable[Any], seen: set[int]) -> int:
    total = 0
    for tensor in map(_local, tensors):
        if tensor is None or not hasattr(tensor, "untyped_storage") or tensor.numel() == 0:
            continue
        key = tensor.untyped_storage().data_ptr() + tensor.storage_offset() * tensor.element_size()
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total


def held_bytes(engine: Any) -> dict[str, int]:
    """Bytes of partitioned parameters, master weights, gradients and optimizer state this rank holds."""
    module = engine.module
    # FSDP2 keeps the root's parameters gathered after a forward (the root does not reshard after forward, and
    # evaluation ran one last): reshard, so that the rank's own shards are what is counted.
    if callable(getattr(module, "reshard", None)):
        module.reshard()
    zero_optimizer = engine.optimizer
    seen: set[int] = set()
    # ZeRO-3 keeps the rank's share of each parameter in ``ds_tensor``; other stages keep full tensors.
    params = [getattr(p, "ds_tensor", p) for p in module.parameters()]
    parameter_bytes = _bytes(params, seen)
    master_bytes = _bytes(
        getattr(zero_optimizer, "fp32_partitioned_groups_flat", None)
        or getattr(zero_optimizer, "single_partition_of_fp32_groups", None)
        or [],
        seen,
    )
    # ZeRO-3 accumulates gradient partitions in one flat fp32 buffer for the whole run.
    grad_buffer = getattr(zero_optimizer, "grad_partitions_flat_buffer", None)
    gradient_bytes = _bytes(
        [grad_buffer] if grad_buffer is not None else [p.grad for p in module.parameters()], seen
    )
    inner = getattr(zero_optimizer, "optimizer", zero_optimizer)
    states = [
        t for state in getattr(inner, "state", {}).values() for t in state.values() if hasattr(t, "numel")
    ]
    # The scalar step counters are not model state: count only tensors shaped like the parameters.
    optimizer_bytes = _bytes([t for t in states if t.dim() > 0], seen)
    return {
        "parameters(bytes)": parameter_bytes,
        "master_parameters(bytes)": master_bytes,
        "gradients(bytes)": gradient_bytes,
        "optimizer_states(bytes)": optimizer_bytes,
        "parameter_count": parameter_count(module),
        "parameter_dtype": str(next(iter(params)).dtype).replace("torch.", "") if params else None,
    }
