"""The launcher wrapper removes the shared-memory buffers DeepSpeed's CPU comm op leaves behind."""

from zerogate.launch import MASTER_ADDR, launcher_command, remove_shm_buffers


def test_only_this_runs_shm_buffers_are_removed(tmp_path):
    ours = [tmp_path / f"deepspeed_allreduce_buffer_0_{MASTER_ADDR}_41234_{rank}" for rank in (0, 1)]
    other_run = tmp_path / f"deepspeed_allreduce_buffer_0_{MASTER_ADDR}_41235_0"
    unrelated = tmp_path / "some_other_program_41234"
    for path in (*ours, other_run, unrelated):
        path.write_bytes(b"x")
    assert remove_shm_buffers(41234, shm=tmp_path) == ours
    assert not any(p.exists() for p in ours)
    assert other_run.exists() and unrelated.exists()


def test_launcher_command_uses_the_given_port_and_rank_count():
    command = launcher_command({"world_size": 2}, ["--run-spec", "r.json"], 41234, "zerogate.train")
    assert command[command.index("--num_gpus") + 1] == "2"
    assert command[command.index("--master_port") + 1] == "41234"
    assert command[-2:] == ["--run-spec", "r.json"]
