"""held_bytes counts each rank's partitioned tensors once, whatever shares storage."""

from types import SimpleNamespace

import torch

from zerogate.contracts.records import HeldBytes
from zerogate.train.held import held_bytes


def held(engine) -> HeldBytes:
    """held_bytes as the training loop writes it for rank 0 of 2 (metrics/held_bytes_rank0.json)."""
    return HeldBytes.of({"rank": 0, "world_size": 2, **held_bytes(engine)}, "the held bytes")


def fake_engine(master_shares_storage: bool):
    module = torch.nn.Linear(4, 2, bias=False)  # 8 elements; this rank holds 4 of them
    flat = torch.zeros(4)
    module.weight.ds_tensor = flat[:4]
    module.weight.ds_numel = 8
    master = flat if master_shares_storage else flat.clone()
    adam = torch.optim.AdamW([master])
    adam.state[master] = {"exp_avg": torch.zeros(4), "exp_avg_sq": torch.zeros(4), "step": torch.tensor(3.0)}
    optimizer = SimpleNamespace(
        fp32_partitioned_groups_flat=[master], grad_partitions_flat_buffer=torch.zeros(4), optimizer=adam
    )
    return SimpleNamespace(module=module, optimizer=optimizer)


def test_separate_master_copy_is_counted():
    record = held(fake_engine(master_shares_storage=False))
    assert record.parameters_bytes == 16 and record.master_parameters_bytes == 16
    assert record.gradients_bytes == 16 and record.optimizer_states_bytes == 32  # scalar step left out
    assert record.parameter_count == 8 and record.parameter_dtype == "float32"


def test_master_sharing_the_parameter_storage_is_not_counted_twice():
    record = held(fake_engine(master_shares_storage=True))
    assert record.parameters_bytes == 16 and record.master_parameters_bytes == 0
