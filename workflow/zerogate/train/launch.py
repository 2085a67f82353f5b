"""Start the training run under DeepSpeed's launcher with the rank count and environment that
render_deepspeed_config chose, teeing the launcher's output to the console and the rule's log.

    python -m zerogate.train.launch --run-spec RUN_SPEC --log LOG -- <arguments of zerogate.train.loop>
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    """A free TCP port for the rendezvous, so runs of several profiles can share a machine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launcher_command(spec: dict, train_args: list[str], port: int, module: str = "zerogate.train.loop") -> list[str]:
    deepspeed = shutil.which("deepspeed") or str(Path(sys.executable).with_name("deepspeed"))
    return [
        deepspeed,
        "--num_gpus",
        str(spec["world_size"]),
        "--master_port",
        str(port),
        "--module",
        module,
        *train_args,
    ]


MASTER_ADDR = "127.0.0.1"  # the launcher's rendezvous address on a single node (its default)
SHM = Path("/dev/shm")
PROC = Path("/proc")


def shm_buffers(port: int, shm: Path = SHM) -> list[Path]:
    """DeepSpeed's shared-memory all-reduce buffers of the run whose rendezvous used ``port``.

    On the CPU accelerator DeepSpeed's shm comm op creates one 69 MB file per rank in /dev/shm, named after
    the master address and port, and never removes it (DeepSpeed 0.19.8, on normal exits too). /dev/shm is
    RAM: about a hundred runs leaked 13 GB here and the next training run was killed for memory.
    """
    return sorted(shm.glob(f"deepspeed_allreduce_buffer_*_{MASTER_ADDR}_{port}_*"))


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-spec", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--module", default="zerogate.train.loop", help="what the launcher runs on each rank")
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.run_spec).read_text())
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    log_path = Path(args.log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_shm_buffers(log_path.parent, SHM):
        print(f"zerogate: removed {stale}, left by an earlier run that was killed", file=sys.stderr)
    port = free_port()
    state = port_state_file(log_path)
    state.write_text(json.dumps({"port": port, "pid": os.getpid()}) + "\n")  # before any rank can create a buffer
    command = launcher_command(spec, ["--run-spec", args.run_spec, *train_args], port, args.module)
    env = {**os.environ, **spec["env"], "PYTHONUNBUFFERED": "1"}

    with open(args.log, "wb") as log:
        log.write((" ".join(command) + "\n").encode())
        try:
            process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert process.stdout is not None
            # Raw chunks, not lines: the progress bar redraws with carriage returns.
            for chunk in iter(lambda: process.stdout.read1(65536), b""):
                log.write(chunk)
                log.flush()
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
            code = process.wait()
        finally:  # also when interrupted: the ranks are gone, their buffers must go too
            remove_shm_buffers(port, SHM)
            state.unlink(missing_ok=True)
    if code != 0:
        out_dir = out_dir_of(train_args)
        kept = keep_failed_records(out_dir, Path(args.log)) if out_dir is not None else None
        where = f"; its records so far are kept in {kept}" if kept is not None else ""
        print(f"zerogate: training failed (launcher exit code {code}); see {args.log}{where}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
