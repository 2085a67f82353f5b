"""The live-tensor count (zerogate.runtime.live_tensors), by hand: every storage alive, each once, until
freed."""

import gc

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from zerogate.runtime.live_tensors import counting_live_bytes, live_storages


def test_the_peak_counts_what_is_alive_at_once_each_storage_once():
    with counting_live_bytes() as live:
        a = torch.zeros(1000)  # 4000 B
        view = a[10:20]  # a view: the same storage, not counted again
        b = torch.ones(500, dtype=torch.float64)  # 4000 B
        assert live.now == 8000 and live.peak == 8000
        del b
        gc.collect()
        assert live.now == 4000
        c = torch.empty(250, dtype=torch.int16)  # 500 B
        assert live.now == 4500 and live.peak == 8000
    assert view.untyped_storage().nbytes() == 4000 and c.numel() == 250


def test_storages_alive_before_the_count_are_counted_from_its_start_and_when_freed():
    kept = torch.zeros(2048, dtype=torch.uint8)
    gc.collect()
    # The seed's storages are handed over, not kept: a storage object held would keep its memory alive.
    with counting_live_bytes(seed=live_storages()) as live:
        start = live.start
        assert start >= 2048 and live.now == start
        kept.add_(1)  # in place: no new storage
        assert live.now == start
        del kept
        gc.collect()
        assert live.now == start - 2048
        extra = torch.zeros(100)
        assert live.peak == start and live.now == start - 2048 + 400
    assert extra.numel() == 100


def test_excluded_storages_are_never_counted():
    weight = torch.zeros(1000)
    with counting_live_bytes(
        excluded={StorageWeakRef(weight.untyped_storage())}, seed=[weight.untyped_storage()]
    ) as live:
        assert live.start == 0
        out = weight + 1
        assert live.now == 4000
    assert out.numel() == 1000


def test_a_storage_resized_in_place_counts_its_new_size():
    """FSDP2 frees an unsharded parameter by resizing its storage to 0 and allocates it again the same way."""
    tensor = torch.zeros(1000)  # 4000 B
    with counting_live_bytes(seed=[tensor.untyped_storage()]) as live:
        assert live.now == 4000
        tensor.untyped_storage().resize_(0)
        assert live.now == 0
        tensor.untyped_storage().resize_(8000)
        assert live.now == 8000 and live.peak == 8000
        other = torch.zeros(10)
        other.untyped_storage().resize_(400)  # created in the count, grown in place
        assert live.now == 8400
    assert torch.UntypedStorage.resize_ is not None and other.numel() == 10
    before = live.now
    tensor.untyped_storage().resize_(0)  # after the count: not seen
    assert live.now == before


def test_each_size_class_keeps_its_own_peak_and_a_resize_moves_a_storage_between_them():
    """glibc's heap holds a storage of at most 32 MiB, a larger one is mapped (zerogate.runtime.heap): the two
    peaks are each class's most alive at once, at different moments here, so they sum above the peak."""
    from zerogate.runtime.heap import GLIBC_MMAP_THRESHOLD_MAX_BYTES as LIMIT

    with counting_live_bytes() as live:
        small = torch.empty(LIMIT, dtype=torch.uint8)  # at the limit: the heap's
        assert live.class_now == {"heap": LIMIT, "mapped": 0}
        del small
        gc.collect()
        large = torch.empty(LIMIT + 1, dtype=torch.uint8)
        assert live.class_now == {"heap": 0, "mapped": LIMIT + 1}
        assert live.class_peak == {"heap": LIMIT, "mapped": LIMIT + 1} and live.peak == LIMIT + 1
        large.untyped_storage().resize_(1000)
        assert live.class_now == {"heap": 1000, "mapped": 0} and live.now == 1000
        assert live.restart_peak() == 1000 and live.class_peak == {"heap": 1000, "mapped": 0}
    assert large.untyped_storage().nbytes() == 1000


def test_a_wrapper_subclass_is_its_inner_tensors_counted_once(one_rank_world):
    """A DTensor (FSDP2's sharded parameters and their Adam states) holds no memory of its own: its local
    tensor is counted, once, and its ops are seen as the plain ops they become."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    sharded = distribute_tensor(torch.zeros(256, 4), mesh, [Shard(0)])  # 4096 B of local tensor
    gc.collect()
    keys = {StorageWeakRef(s) for s in live_storages()}
    assert StorageWeakRef(sharded.to_local().untyped_storage()) in keys
    with counting_live_bytes(
        excluded=keys - {StorageWeakRef(sharded.to_local().untyped_storage())}, seed=live_storages()
    ) as live:
        assert live.start == 4096  # the wrapper's own (phantom) storage is not counted beside it
        doubled = sharded * 2  # a DTensor op: its local result, 4096 B
        assert live.now == 8192
    assert doubled.to_local().numel() == 1024
