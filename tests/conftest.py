"""Shared fixtures: repository paths, a CPU machine fingerprint as the probe writes it, and the start of the
shared smoke run (tests/integration/conftest.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.contracts.machine import Fingerprint
from zerogate.runtime.ops import build_env

# Tests that build a DeepSpeed engine in-process load the ops `make setup` built, as the workflow's jobs do.
os.environ.update(build_env())

REPO = Path(__file__).resolve().parents[1]

# A machine as the probe describes it (zerogate.contracts.machine.Fingerprint), without its measurements.
CPU_FINGERPRINT = Fingerprint.of(
    {
        "hostname": "testbox",
        "platform": "Linux",
        "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2, "affinity_cores": 2},
        "ram": {"total_bytes": 24 * 1024**3, "available_bytes": 20 * 1024**3},
        "accelerator": {"kind": "cpu", "count": 0, "devices": [], "cpu": {"fp16_supported": False}},
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "deepspeed": "0.19.8"},
    },
    "the test fingerprint",
)


def gpu_fingerprint(*devices: tuple[str, float]) -> Fingerprint:
    """A CUDA machine with the given (name, GiB) devices."""
    data = CPU_FINGERPRINT.model_dump()
    data["accelerator"] = {
        "kind": "cuda",
        "count": len(devices),
        "devices": [
            {
                "index": i,
                "name": name,
                "memory_total_bytes": int(gib * 1024**3),
                "compute_capability": "8.9",
                "bf16_supported": True,
                "fp16_supported": True,
            }
            for i, (name, gib) in enumerate(devices)
        ],
    }
    data["cpu"]["affinity_cores"] = 16
    return Fingerprint.of(data, "the test fingerprint")


@pytest.fixture(scope="module")
def one_rank_world():
    """This process as a torch.distributed world of one rank (DeepSpeed's CPU accelerator, gloo), for the
    tests that need DeepSpeed's partitioning in-process; the environment and shm buffers restored after."""
    saved = {
        k: os.environ.get(k)
        for k in (
            "DS_ACCELERATOR",
            "MASTER_ADDR",
            "MASTER_PORT",
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_SIZE",
        )
    }
    os.environ["DS_ACCELERATOR"] = "cpu"
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    from zerogate.runtime.launch import remove_own_shm_buffers, shm_buffers, start_one_rank_world

    if get_accelerator().device_name() != "cpu":
        pytest.skip("DeepSpeed's accelerator was already chosen as non-CPU in this session")
    port = start_one_rank_world("gloo")
    yield
    dist.destroy_process_group()
    # This process still maps its world's buffers: remove_shm_buffers would keep them as held by a live one.
    remove_own_shm_buffers(port)
    assert not shm_buffers(port), "the one-rank world's DeepSpeed shm buffers outlived it"
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def cpu_fingerprint() -> Fingerprint:
    return CPU_FINGERPRINT


@pytest.fixture
def claim_config() -> dict:
    return json.loads((REPO / "config/deepspeed/claim_ds_config.json").read_text())


@pytest.fixture
def tiny_profile() -> dict:
    return resolve_profile(
        load_profile_chain(REPO / "config/profiles", "cpu-tiny", "config/config.yaml", "profile")
    )


@pytest.fixture
def smoke_profile() -> dict:
    return resolve_profile(
        load_profile_chain(REPO / "config/profiles", "smoke", "config/config.yaml", "profile")
    )


@pytest.fixture(scope="session", autouse=True)
def smoke_run_started(request, tmp_path_factory):
    """The shared smoke pipeline (tests/integration/conftest.py: smoke_run), started in the background before
    the first test when any selected test needs it, so the unit tests, ordered first, run while it trains.
    The moment it has ended well, a thread starts the two-node run (where a selected test needs it) and the
    prefetched fixtures' builds (tests/integration/prefetch.py), so that they too run beside the unit tests;
    that thread's result (``follower``) is the finished run as the integration tests see it.
    None when no selected test needs the smoke run."""
    if not any("smoke_run" in item.fixturenames for item in request.session.items):
        return None
    from tests.integration import prefetch
    from tests.integration.background import (
        SmokeRun,
        slurm_answers,
        start_smoke_run,
        start_two_node_run,
        then_start,
    )
    from tests.integration.pipeline import MACHINE

    run = start_smoke_run(tmp_path_factory.mktemp("zerogate-smoke"))
    request.addfinalizer(run.stop)
    needs_two_nodes = any("two_node_run" in item.fixturenames for item in request.session.items)
    two_node_target = tmp_path_factory.mktemp("zerogate-2node") if needs_two_nodes else None
    session = request.session

    def after_smoke() -> SmokeRun:
        # The two-node run starts from a copy of the finished smoke run.
        results = run.workdir / "results" / "smoke" / MACHINE
        two_node = None
        if two_node_target is not None:
            two_node = start_two_node_run(
                run.workdir, results, two_node_target, through_slurm=slurm_answers()
            )
        finished = SmokeRun(run.workdir, results, two_node)
        prefetch.start(session, tmp_path_factory, finished)
        return finished

    then_start(run, after_smoke)

    def stop_followers() -> None:
        run.stop()  # so that a follower still waiting on the smoke run gives up
        finished = run.follower.result(timeout=120)
        if finished is not None and finished.two_node is not None:
            finished.two_node.background.stop()
        prefetch.stop()

    request.addfinalizer(stop_followers)
    return run
