"""The launcher wrapper removes the shared-memory buffers DeepSpeed's CPU comm op leaves behind."""

import json
import socket
import sys

from tests.unit.helpers import step_record
from tests.unit.test_ledger import rendered
from zerogate.contracts.base import line_of
from zerogate.contracts.records import StabiliserEvent
from zerogate.runtime.launch import (
    free_port,
    keep_failed_records,
    out_dir_of,
    remove_shm_buffers,
    run_layout,
    wait_all,
)
from zerogate.runtime.nodes import LOCAL_MASTER_ADDR


def test_only_this_runs_shm_buffers_are_removed(tmp_path):
    ours = [tmp_path / f"deepspeed_allreduce_buffer_0_{LOCAL_MASTER_ADDR}_41234_{rank}" for rank in (0, 1)]
    other_run = tmp_path / f"deepspeed_allreduce_buffer_0_{LOCAL_MASTER_ADDR}_41235_0"
    unrelated = tmp_path / "some_other_program_41234"
    for path in (*ours, other_run, unrelated):
        path.write_bytes(b"x")
    assert remove_shm_buffers(41234, shm=tmp_path) == ours
    assert not any(p.exists() for p in ours)
    assert other_run.exists() and unrelated.exists()


def test_a_one_node_spec_is_one_launcher_of_world_size_ranks(tmp_path):
    _, spec = rendered()  # cpu-tiny on the test machine: 2 ranks, one node
    assert spec.world_size == 2 and spec.nodes is None
    nodes = run_layout(spec, tmp_path / "train.log")
    assert (nodes.multi_node, nodes.ranks_per_node, nodes.world_size) == (False, 2, 2)


def test_a_failed_node_stops_the_others_within_the_grace_time():
    import subprocess
    import time

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    assert wait_all({0: alive, 1: dead}, grace_s=5) == 3
    assert alive.poll() is not None and time.monotonic() - started < 20


def test_a_failed_runs_records_are_kept_beside_its_log(tmp_path):
    out, logs = tmp_path / "train", tmp_path / "logs"
    (out / "metrics").mkdir(parents=True)
    logs.mkdir()
    step = line_of(step_record(step=1)) + "\n"
    event = (
        line_of(StabiliserEvent(step=12, rank=0, kind="nonfinite_loss", value="nan", action="abort")) + "\n"
    )
    (out / "metrics" / "rank0.jsonl").write_text(step)
    (out / "events.jsonl").write_text(event)
    log = logs / "train.log"
    kept = keep_failed_records(out, log)
    assert kept == logs / "train_failed"
    assert (kept / "events.jsonl").read_text() == event
    assert (kept / "metrics" / "rank0.jsonl").read_text() == step
    assert not (kept / "eval.jsonl").exists()
    # A later failure replaces the copy rather than mixing two runs.
    (out / "events.jsonl").unlink()
    keep_failed_records(out, log)
    assert not (kept / "events.jsonl").exists() and (kept / "metrics" / "rank0.jsonl").exists()


def test_nothing_is_kept_when_the_run_recorded_nothing(tmp_path):
    assert keep_failed_records(tmp_path / "never-made", tmp_path / "train.log") is None
    assert not (tmp_path / "train_failed").exists()


def test_out_dir_is_read_from_the_training_arguments():
    assert (
        str(out_dir_of(["--ds-config", "c.json", "--out-dir", "results/x/train", "--settings", "s"]))
        == "results/x/train"
    )
    assert out_dir_of(["--ds-config", "c.json"]) is None


def buffers(shm, port, ranks=(0, 1)):
    paths = [shm / f"deepspeed_allreduce_buffer_0_{LOCAL_MASTER_ADDR}_{port}_{rank}" for rank in ranks]
    for path in paths:
        path.write_bytes(b"x")
    return paths


def fake_process(proc, pid, mapped=()):
    """/proc/<pid>/maps of a process that has ``mapped`` mmapped, as the kernel writes it."""
    (proc / str(pid)).mkdir(parents=True)
    lines = [f"7f0000000000-7f0004200000 rw-s 00000000 00:1a 1234                       {p}" for p in mapped]
    (proc / str(pid) / "maps").write_text("\n".join(lines) + "\n")


def test_a_killed_runs_buffers_are_removed_by_the_next_launch(tmp_path):
    """After a SIGKILL of the Snakemake process group the launcher's finally never ran: the next launch
    removes what the killed run left."""
    from zerogate.runtime.launch import port_state_file, remove_stale_shm_buffers

    shm, proc, logs = tmp_path / "shm", tmp_path / "proc", tmp_path / "logs"
    for d in (shm, proc, logs):
        d.mkdir()
    killed = buffers(shm, 41000)
    port_state_file(logs / "train.log").write_text(json.dumps({"port": 41000, "pid": 999999}))
    fake_process(proc, 1, mapped=["/usr/lib/libc.so.6"])
    assert remove_stale_shm_buffers(logs, shm, proc) == killed
    assert not any(p.exists() for p in killed) and not list(logs.iterdir())


def test_buffers_a_live_run_holds_are_never_removed(tmp_path):
    """Another run (another helper's, or ours reusing the port) that maps the buffers keeps them."""
    from zerogate.runtime.launch import port_state_file, remove_stale_shm_buffers

    shm, proc, logs = tmp_path / "shm", tmp_path / "proc", tmp_path / "logs"
    for d in (shm, proc, logs):
        d.mkdir()
    live = buffers(shm, 42000)
    fake_process(proc, 4242, mapped=live)
    port_state_file(logs / "train.log").write_text(json.dumps({"port": 42000, "pid": 999999}))
    assert remove_stale_shm_buffers(logs, shm, proc) == []
    assert all(p.exists() for p in live) and port_state_file(logs / "train.log").exists()
    assert remove_shm_buffers(42000, shm=shm, proc=proc) == [] and all(p.exists() for p in live)


def test_a_running_launchs_state_file_is_left_alone(tmp_path):
    from zerogate.runtime.launch import port_state_file, remove_stale_shm_buffers

    shm, proc, logs = tmp_path / "shm", tmp_path / "proc", tmp_path / "logs"
    for d in (shm, proc, logs):
        d.mkdir()
    fake_process(proc, 777)
    port_state_file(logs / "train_variant.log").write_text(json.dumps({"port": 43000, "pid": 777}))
    assert (
        remove_stale_shm_buffers(logs, shm, proc) == []
        and port_state_file(logs / "train_variant.log").exists()
    )


def test_the_launcher_records_its_port_and_cleans_up_after_a_normal_exit(tmp_path, monkeypatch):
    """End to end with a stand-in for DeepSpeed's launcher: the state file exists while it runs, and a
    kill's leftovers from an earlier launch are gone before it starts."""
    import zerogate.runtime.launch as launch

    shm, logs = tmp_path / "shm", tmp_path / "logs"
    shm.mkdir()
    logs.mkdir()
    earlier = buffers(shm, 44000)
    launch.port_state_file(logs / "train.log").write_text(json.dumps({"port": 44000, "pid": 999999}))
    spec = rendered()[1].write(tmp_path / "run_spec.json")
    seen = {}

    def fake_commands(nodes, deepspeed, port, module, train_args, node_ranks):
        seen["port"] = port
        state = launch.port_state_file(logs / "train.log")
        return {0: [sys.executable, "-c", f"import json; print(json.load(open({str(state)!r}))['port'])"]}

    monkeypatch.setattr(launch, "SHM", shm)
    monkeypatch.setattr(launch, "launcher_commands", fake_commands)
    assert launch.main(["--run-spec", str(spec), "--log", str(logs / "train.log"), "--"]) == 0
    assert not any(p.exists() for p in earlier)
    assert str(seen["port"]) in (logs / "train.log").read_text()  # the state file held this run's port
    assert not launch.port_state_file(logs / "train.log").exists()


def test_the_rendezvous_port_binds_and_lies_below_the_kernels_range_for_outgoing_ports(tmp_path):
    """Outgoing connections (every gloo connection of a run beside this one) take ports from the kernel's
    range; a rendezvous port drawn below it cannot be taken that way between its choice and its bind."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    ports = {free_port(ranges) for _ in range(20)}
    assert all(1024 <= port < 40000 for port in ports) and len(ports) > 1
    for port in ports:
        with socket.socket() as sock:
            sock.bind((LOCAL_MASTER_ADDR, port))  # free when chosen, and still free now
    assert 0 < free_port(tmp_path / "missing") < 65536  # no range to read: any port the kernel gives
