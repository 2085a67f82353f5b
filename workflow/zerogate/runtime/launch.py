"""Start the training run under DeepSpeed's launcher with the rank count and environment that
render_deepspeed_config chose, teeing the launcher's output to the console and the rule's log.

    python -m zerogate.runtime.launch --run-spec RUN_SPEC --log LOG -- <arguments of zerogate.train.loop>

Several nodes (run_spec's ``nodes``, zerogate.runtime.nodes): one DeepSpeed launcher per node of this
machine (no_ssh), or one whose slurm backend starts every rank with srun; each node's output in its own
log (node 0: LOG, node i: train.node<i>.log beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from zerogate.contracts.run import RunSpec
from zerogate.errors import InputError
from zerogate.runtime.nodes import LOCAL_MASTER_ADDR, NodeLayout, launcher_commands, layout, node_log
from zerogate.runtime.ops import keep_cpu_info

# Linux hands out the ports of outgoing connections from this range (ip(7), ip_local_port_range); every gloo
# connection of a run beside this one takes one. A rendezvous port chosen inside it can be taken between its
# choice and its bind (EADDRINUSE), so the rendezvous port is chosen below it.
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 1024  # below: privileged ports (ip(7))


def free_port(range_file: Path = PORT_RANGE_FILE) -> int:
    """A free TCP port for the rendezvous, so runs of several profiles can share a machine: one that binds
    now, drawn at random below the kernel's range for outgoing connections' ports (where there is one to
    read, else any the kernel gives)."""
    try:
        first_ephemeral = int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = LOWEST_PORT
    candidates = range(LOWEST_PORT, first_ephemeral)
    drawn = random.SystemRandom().sample(candidates, min(200, len(candidates)))
    for port in [*drawn, 0]:
        with socket.socket() as sock:
            try:
                sock.bind((LOCAL_MASTER_ADDR, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free TCP port to bind")


SHM = Path("/dev/shm")
PROC = Path("/proc")


def shm_buffers(port: int, shm: Path = SHM) -> list[Path]:
    """DeepSpeed's shared-memory all-reduce buffers of the run whose rendezvous used ``port``.

    On the CPU accelerator DeepSpeed's shm comm op creates one 69 MB file per rank in /dev/shm, named after
    the master address and port, and never removes it (DeepSpeed 0.19.8, on normal exits too). /dev/shm is
    RAM: about a hundred runs leaked 13 GB here and the next training run was killed for memory.
    """
    return sorted(shm.glob(f"deepspeed_allreduce_buffer_*_{LOCAL_MASTER_ADDR}_{port}_*"))


# Assumed: far longer than any wait of the planning-stage measurements on a peer process (a collective takes
# milliseconds, one rate's timing a few seconds), so a wait this long means a peer died.
PEER_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class LocalWorld:
    """A torch.distributed world of ``size`` processes on this host, this process its rank ``rank``, meeting
    at ``port`` (None: a free one, which only a world of one rank can draw for itself)."""

    rank: int = 0
    size: int = 1
    port: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a world of {self.size}")
        if self.size > 1 and self.port is None:
            raise ValueError("a world of several processes needs the port they all meet at")


def start_local_world(backend: str, world: LocalWorld) -> int:
    """Make this process rank ``world.rank`` of a torch.distributed world on this host (through DeepSpeed),
    as the planning-stage measurements do; the port, which names the world's shm buffers
    (remove_own_shm_buffers). DS_ACCELERATOR must already be in the environment."""
    # Here, not at the top: DeepSpeed picks its accelerator from DS_ACCELERATOR when it is imported, and
    # the launcher process (main) and the gloo benchmark import this module without loading DeepSpeed.
    import deepspeed

    port = free_port() if world.port is None else world.port
    os.environ.update(
        RANK=str(world.rank),
        WORLD_SIZE=str(world.size),
        LOCAL_RANK=str(world.rank),
        LOCAL_SIZE=str(world.size),
        MASTER_ADDR=LOCAL_MASTER_ADDR,
        MASTER_PORT=str(port),
    )
    keep_cpu_info()  # DeepSpeed asks py-cpuinfo again at every op it loads
    if world.size == 1:
        deepspeed.init_distributed(dist_backend=backend)
    else:  # a rank whose peer died fails here instead of waiting out torch's default half hour
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=PEER_TIMEOUT_S))
    return port


def start_one_rank_world(backend: str) -> int:
    """Make this process a torch.distributed world of one rank on a free local port
    (:func:`start_local_world`); the port."""
    return start_local_world(backend, LocalWorld())


def one_rank_config(ds_config: dict) -> dict:
    """A copy of a rendered DeepSpeed config for a world of one rank: its global batch is one rank's."""
    config = json.loads(json.dumps(ds_config))
    config["train_batch_size"] = (
        config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"]
    )
    return config


def remove_own_shm_buffers(port: int, shm: Path = SHM) -> None:
    """Delete the shm buffers of this process's own planning-stage world (held by its processes, which are
    about to exit: remove_shm_buffers would keep them)."""
    for path in shm_buffers(port, shm):
        path.unlink(missing_ok=True)


def remove_shm_buffers(port: int, shm: Path = SHM, proc: Path = PROC) -> list[Path]:
    """Delete the buffers of the run that used ``port``, except any a live process holds (another run
    that reused the port: never delete what a running training uses)."""
    buffers = shm_buffers(port, shm)
    held = held_by_live_processes(buffers, proc)
    for path in buffers:
        if path not in held:
            path.unlink(missing_ok=True)
    return [path for path in buffers if path not in held]


# Beside the rule's log: the rendezvous port of a launch in progress, removed when it ends. One left behind
# means that launch was killed (SIGKILL of the Snakemake process group skips every finally:).
PORT_STATE_SUFFIX = ".shm_port.json"


def port_state_file(log: Path) -> Path:
    return log.with_name(log.name + PORT_STATE_SUFFIX)


def held_by_live_processes(paths: list[Path], proc: Path = PROC) -> set[Path]:
    """Those of ``paths`` that a running process has open or mapped (/proc/<pid>/fd and /proc/<pid>/maps).

    DeepSpeed's ranks mmap their buffer, so a live run always shows it in its maps. Processes whose
    entries cannot be read (another user's) are skipped: our runs are ours."""
    wanted = {str(path): path for path in paths}
    held: set[Path] = set()
    if not wanted:
        return held
    for pid_dir in proc.iterdir() if proc.is_dir() else []:
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target in wanted:
                    held.add(wanted[target])
        except OSError:
            pass
        try:
            maps = (pid_dir / "maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(None, 5)
            if len(fields) == 6:
                mapped = fields[5].removesuffix(" (deleted)")
                if mapped in wanted:
                    held.add(wanted[mapped])
    return held


def remove_stale_shm_buffers(log_dir: Path, shm: Path = SHM, proc: Path = PROC) -> list[Path]:
    """Buffers that earlier, killed launches of this machine's rules left in ``shm`` (their ports are in the
    state files in ``log_dir``), removed unless a live process still holds them. A buffer of another run
    that happens to reuse the port is held by that run, so it stays."""
    removed: list[Path] = []
    for state in sorted(log_dir.glob(f"*{PORT_STATE_SUFFIX}")):
        try:
            recorded = json.loads(state.read_text())
            port = int(recorded["port"])
        except (OSError, ValueError, KeyError, TypeError):
            state.unlink(missing_ok=True)
            continue
        if recorded.get("pid") and (proc / str(recorded["pid"])).exists():
            continue  # that launch is still running (another job of this machine): its state is its own
        gone = remove_shm_buffers(port, shm, proc)
        removed += gone
        if not shm_buffers(port, shm):  # nothing held any more: this state file has done its job
            state.unlink(missing_ok=True)
    return removed


# What a run has recorded so far (zerogate.train.loop writes them under --out-dir).
RUN_RECORDS = ("metrics", "events.jsonl", "eval.jsonl", "summary.json")


def keep_failed_records(out_dir: Path, log: Path) -> Path | None:
    """Copy a failed run's records beside the rule's log, into ``<log stem>_failed/``.

    Snakemake deletes a failed job's outputs but keeps its log: without this copy a stabiliser abort
    would take its own evidence (events.jsonl: step, rank, value, action) and the metrics up to the
    fault with it. A later failure replaces the copy. None when the run recorded nothing.
    """
    present = [out_dir / name for name in RUN_RECORDS if (out_dir / name).exists()]
    if not present:
        return None
    kept = log.parent / f"{log.stem}_failed"
    if kept.exists():
        shutil.rmtree(kept)
    kept.mkdir(parents=True)
    for path in present:
        if path.is_dir():
            shutil.copytree(path, kept / path.name)
        else:
            shutil.copy2(path, kept / path.name)
    return kept


def out_dir_of(train_args: list[str]) -> Path | None:
    """The ``--out-dir`` among the training arguments, if given."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--out-dir")
    known, _ = parser.parse_known_args(train_args)
    return Path(known.out_dir) if known.out_dir else None


def deepspeed_executable() -> str:
    return shutil.which("deepspeed") or str(Path(sys.executable).with_name("deepspeed"))


def run_layout(spec: RunSpec, log_path: Path) -> NodeLayout:
    """The nodes this run spans (run_spec.json's ``nodes``, laid out again here: inside a Slurm
    allocation the allocation is checked and, without a hostfile, becomes it)."""
    nodes = spec.nodes
    if not nodes:
        return NodeLayout(ranks_per_node=spec.world_size)
    env = os.environ if nodes.mode == "slurm" else None
    return layout(
        nodes.section,
        nodes.profile_file,
        Path.cwd(),
        None,
        env=env,
        hostfile_out=log_path.with_suffix(".hostfile"),
    )


def tee(process: subprocess.Popen, log: Path) -> threading.Thread:
    """Copy a launcher's output to its log and the console as it comes (raw chunks: the progress bar
    redraws with carriage returns)."""

    def copy() -> None:
        assert process.stdout is not None
        with open(log, "ab") as out:
            for chunk in iter(lambda: process.stdout.read1(65536), b""):
                out.write(chunk)
                out.flush()
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def wait_all(processes: dict[int, subprocess.Popen], grace_s: float = 10.0) -> int:
    """Wait for every node's launcher; when one fails, stop the others (a dead node must not leave the
    rest waiting in a collective). The first non-zero exit code, else 0."""
    while True:
        codes = {node: p.poll() for node, p in processes.items()}
        failed = [code for code in codes.values() if code not in (None, 0)]
        if failed or all(code is not None for code in codes.values()):
            break
        time.sleep(0.5)
    for node, process in processes.items():
        if process.poll() is None:
            print(f"zerogate: node {node}'s launcher stopped: another node failed", file=sys.stderr)
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return failed[0] if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-spec", required=True)
    parser.add_argument(
        "--log", required=True, help="node 0's launcher log (node i: train.node<i>.log beside it)"
    )
    parser.add_argument("--module", default="zerogate.train.loop", help="what the launcher runs on each rank")
    parser.add_argument(
        "--node-rank",
        type=int,
        action="append",
        help="several nodes, no_ssh: start this node's launcher only (default: every node that is "
        "this machine); run it on each other node with the same arguments",
    )
    parser.add_argument(
        "--master-port", type=int, help="several nodes started by hand: the port all of them use"
    )
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def start_launchers(
    commands: dict[int, list[str]],
    env: dict[str, str],
    log_path: Path,
    processes: dict[int, subprocess.Popen],
) -> list[threading.Thread]:
    """Start each node's launcher, its command line first in its log and its output teed after it; each one
    started goes into ``processes`` at once (so a failure to start the next leaves it to be stopped)."""
    copies: list[threading.Thread] = []
    for node, command in commands.items():
        log = node_log(log_path, node)
        log.write_text(" ".join(command) + "\n")
        processes[node] = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=len(commands) > 1,
        )
        copies.append(tee(processes[node], log))
    return copies


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = RunSpec.read(args.run_spec)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    log_path = Path(args.log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        nodes = run_layout(spec, log_path)
    except InputError as error:
        print(f"zerogate: error: {error}", file=sys.stderr)
        return 2
    for stale in remove_stale_shm_buffers(log_path.parent, SHM):
        print(f"zerogate: removed {stale}, left by an earlier run that was killed", file=sys.stderr)
    # Several machines started by hand must meet on a port they all know: the profile's, else a free one.
    port = (
        args.master_port
        or ((spec.nodes.section if spec.nodes else None) or {}).get("master_port")
        or free_port()
    )
    state = port_state_file(log_path)
    state.write_text(
        json.dumps({"port": port, "pid": os.getpid()}) + "\n"
    )  # before any rank can create a buffer
    commands = launcher_commands(
        nodes,
        deepspeed_executable(),
        port,
        args.module,
        ["--run-spec", args.run_spec, *train_args],
        args.node_rank,
    )
    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    processes: dict[int, subprocess.Popen] = {}
    try:
        copies = start_launchers(commands, env, log_path, processes)
        code = wait_all(processes)
        for copy in copies:  # the launchers have exited: let their last output reach the logs
            copy.join(timeout=10)
    finally:  # also when interrupted: the ranks are gone, their buffers must go too
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        remove_shm_buffers(port, SHM)
        state.unlink(missing_ok=True)
    if code != 0:
        report_failure(code, train_args, args.log)
    return code


def report_failure(code: int, train_args: list[str], log: str) -> None:
    """Keep a failed run's records beside its log (``log``) and say where they are."""
    out_dir = out_dir_of(train_args)
    kept = keep_failed_records(out_dir, Path(log)) if out_dir is not None else None
    where = f"; its records so far are kept in {kept}" if kept is not None else ""
    print(f"zerogate: training failed (launcher exit code {code}); see {log}{where}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
