"""Node layouts for multi-node runs: hostfile checks (DeepSpeed's parser), allocation checks, commands."""

from __future__ import annotations

import socket

import pytest

from zerogate.errors import InputError
from zerogate.runtime.nodes import NodeLayout, launcher_commands, layout, rank_env_from_slurm

PROFILE = "config/profiles/mine.yaml"


def hostfile(tmp_path, text: str) -> dict:
    (tmp_path / "hosts").write_text(text)
    return {"hostfile": "hosts", "ranks_per_node": 1}


def test_two_names_of_this_machine_are_two_nodes_started_here(tmp_path):
    section = hostfile(tmp_path, f"{socket.gethostname()} slots=1\nlocalhost slots=1\n")
    nodes = layout(section, PROFILE, tmp_path, devices_per_node=None)
    assert (nodes.count, nodes.world_size, nodes.mode) == (2, 2, "no_ssh")
    commands = launcher_commands(nodes, "deepspeed", 29500, "zerogate.train.loop", ["--x", "1"])
    assert sorted(commands) == [0, 1]
    for node_rank, command in commands.items():
        assert command[command.index("--node_rank") + 1] == str(node_rank)
        assert "--no_ssh" in command and command[-2:] == ["--x", "1"]
        assert command[command.index("--num_nodes") + 1] == "2"


def test_a_remote_node_is_left_to_its_own_launcher(tmp_path):
    nodes = layout(hostfile(tmp_path, "localhost slots=1\nnode-b.example slots=1\n"), PROFILE, tmp_path, None)
    assert sorted(launcher_commands(nodes, "deepspeed", 1, "m", [])) == [0]
    assert sorted(launcher_commands(nodes, "deepspeed", 1, "m", [], node_ranks=[1])) == [1]


def test_a_host_named_twice_is_refused_in_one_line_naming_the_file(tmp_path):
    with pytest.raises(InputError) as error:
        layout(hostfile(tmp_path, "localhost slots=1\nlocalhost slots=1\n"), PROFILE, tmp_path, None)
    message = str(error.value)
    assert message.startswith(f"{PROFILE}: nodes.hostfile: ") and "multiple entries for localhost" in message
    assert "\n" not in message


def test_more_ranks_per_node_than_devices_or_slots_is_refused(tmp_path):
    section = {**hostfile(tmp_path, "localhost slots=4\n127.0.0.2 slots=4\n"), "ranks_per_node": 2}
    with pytest.raises(InputError, match="nodes.ranks_per_node: 2 ranks per node, but a node has 1 device"):
        layout(section, PROFILE, tmp_path, devices_per_node=1)
    section = {**hostfile(tmp_path, "localhost slots=1\n127.0.0.2 slots=1\n"), "ranks_per_node": 2}
    with pytest.raises(InputError, match="gives localhost 1 slot"):
        layout(section, PROFILE, tmp_path, devices_per_node=None)


def test_node_count_must_match_the_hostfile_and_the_slurm_allocation(tmp_path):
    section = hostfile(tmp_path, "localhost slots=1\n127.0.0.2 slots=1\n")
    with pytest.raises(InputError, match="nodes.count: 3 nodes, but hostfile hosts lists 2"):
        layout({**section, "count": 3}, PROFILE, tmp_path, None)
    slurm = {**section, "mode": "slurm"}
    with pytest.raises(InputError, match="not inside a Slurm allocation"):
        layout(slurm, PROFILE, tmp_path, None, env={"SLURM_JOB_NODELIST": ""})
    with pytest.raises(InputError, match="allocation has 1 node"):
        layout(slurm, PROFILE, tmp_path, None, env={"SLURM_JOB_NUM_NODES": "1"})
    nodes = layout(slurm, PROFILE, tmp_path, None, env={"SLURM_JOB_NUM_NODES": "2"})
    (command,) = launcher_commands(nodes, "deepspeed", 1, "m", []).values()
    assert command[command.index("--launcher") + 1] == "slurm" and "--no_ssh" not in command


def test_one_node_is_the_plain_local_launch():
    (command,) = launcher_commands(
        NodeLayout(ranks_per_node=2), "deepspeed", 41234, "zerogate.train.loop", ["--a"]
    ).values()
    assert command == [
        "deepspeed",
        "--num_gpus",
        "2",
        "--master_port",
        "41234",
        "--module",
        "zerogate.train.loop",
        "--a",
    ]
    assert NodeLayout(hosts=("a", "b"), ranks_per_node=2).node_of(3) == (1, 1)


def test_srun_tasks_get_torch_rank_variables():
    srun = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}
    assert rank_env_from_slurm(srun) == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert rank_env_from_slurm({**srun, "RANK": "0"}) == {}
    assert rank_env_from_slurm({}) == {}


def test_without_a_hostfile_slurm_mode_takes_the_allocations_nodes(tmp_path, monkeypatch):
    import zerogate.runtime.nodes as nodes_module

    section = {"mode": "slurm", "count": 2, "ranks_per_node": 2}
    # When rendering (outside the allocation): placeholders, the world size known from count.
    rendered = layout(section, PROFILE, tmp_path, devices_per_node=2)
    assert rendered.world_size == 4 and rendered.hostfile is None
    # At launch, inside the allocation: its node list (scontrol show hostnames) becomes the hostfile.
    monkeypatch.setattr(nodes_module, "allocation_hosts", lambda env: ["gpu-a", "gpu-b"])
    hostfile = tmp_path / "train.hostfile"
    launched = layout(
        section, PROFILE, tmp_path, None, env={"SLURM_JOB_NUM_NODES": "2"}, hostfile_out=hostfile
    )
    assert launched.hosts == ("gpu-a", "gpu-b")
    assert hostfile.read_text() == "gpu-a slots=2\ngpu-b slots=2\n"
    with pytest.raises(InputError, match="nodes.count: 2 nodes, but hostfile"):
        monkeypatch.setattr(nodes_module, "allocation_hosts", lambda env: ["gpu-a"])
        layout(section, PROFILE, tmp_path, None, env={"SLURM_JOB_NUM_NODES": "1"}, hostfile_out=hostfile)
