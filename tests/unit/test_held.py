"""held_bytes counts each rank's partitioned tensors once, whatever shares storage."""

from types import SimpleNamespace

import torch

from zerogate.train.held import held_bytes


def fake_engine(master_shares_storage: bool):
    module = torch.nn.Linear(4, 2, bias=False)  # 8 elements; this rank holds 4 of them
    flat = torch.zeros(4)
    module.weight.ds_tensor = flat[:4]
    module.weight.ds_numel = 8
    master = flat if master_shares_storage else flat.clone()
    adam = torch.optim.AdamW([master])
    adam.state[master] = {"exp_avg": torch.zeros(4), "exp_avg_sq": torch.zeros(4), "step": torch.tensor(3.0)}
    optimizer = SimpleNamespace(fp32_partitioned_groups_flat=[master], grad_partitions_flat_buffer=torch.zeros(4),
                                optimizer=adam)
    return SimpleNamespace(module=module, optimizer=optimizer)


def test_separate_master_copy_is_counted():
    held = held_bytes(fake_engine(master_shares_storage=False))
    assert held["parameters(bytes)"] == 16 and held["master_parameters(bytes)"] == 16
    assert held["gradients(bytes)"] == 16 and held["optimizer_states(bytes)"] == 32  # scalar step left out
    assert held["parameter_count"] == 8 and held["parameter_dtype"] == "float32"


def test_master_sharing_the_parameter_storage_is_not_counted_twice():
    held = held_bytes(fake_engine(master_shares_storage=True))
    assert held["parameters(bytes)"] == 16 and held["master_parameters(bytes)"] == 0
