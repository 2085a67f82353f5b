"""The live-tensor count (zerogate.runtime.live_tensors), by hand: every storage alive, each once, until freed."""

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
    with counting_live_bytes(excluded={StorageWeakRef(weight.untyped_storage())}, seed=[weight.untyped_storage()]) as live:
        assert live.start == 0
        out = weight + 1
        assert live.now == 4000
    assert out.numel() == 1000
