"""The launcher wrapper removes the shared-memory buffers DeepSpeed's CPU comm op leaves behind."""

from zerogate.train.launch import MASTER_ADDR, keep_failed_records, launcher_command, out_dir_of, remove_shm_buffers


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
    command = launcher_command({"world_size": 2}, ["--run-spec", "r.json"], 41234, "zerogate.train.loop")
    assert command[command.index("--num_gpus") + 1] == "2"
    assert command[command.index("--master_port") + 1] == "41234"
    assert command[-2:] == ["--run-spec", "r.json"]


def test_a_failed_runs_records_are_kept_beside_its_log(tmp_path):
    out, logs = tmp_path / "train", tmp_path / "logs"
    (out / "metrics").mkdir(parents=True)
    logs.mkdir()
    (out / "metrics" / "rank0.jsonl").write_text('{"step": 1}\n')
    (out / "events.jsonl").write_text('{"step": 12, "action": "abort"}\n')
    log = logs / "train.log"
    kept = keep_failed_records(out, log)
    assert kept == logs / "train_failed"
    assert (kept / "events.jsonl").read_text() == '{"step": 12, "action": "abort"}\n'
    assert (kept / "metrics" / "rank0.jsonl").read_text() == '{"step": 1}\n'
    assert not (kept / "eval.jsonl").exists()
    # A later failure replaces the copy rather than mixing two runs.
    (out / "events.jsonl").unlink()
    keep_failed_records(out, log)
    assert not (kept / "events.jsonl").exists() and (kept / "metrics" / "rank0.jsonl").exists()


def test_nothing_is_kept_when_the_run_recorded_nothing(tmp_path):
    assert keep_failed_records(tmp_path / "never-made", tmp_path / "train.log") is None
    assert not (tmp_path / "train_failed").exists()


def test_out_dir_is_read_from_the_training_arguments():
    assert str(out_dir_of(["--ds-config", "c.json", "--out-dir", "results/x/train", "--settings", "s"])) == "results/x/train"
    assert out_dir_of(["--ds-config", "c.json"]) is None
