"""Start the training run under DeepSpeed's launcher with the rank count and environment that
render_deepspeed_config chose, teeing the launcher's output to the console and the rule's log.

    python -m zerogate.launch --run-spec RUN_SPEC --log LOG -- <arguments of zerogate.train>
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


def launcher_command(spec: dict, train_args: list[str], port: int, module: str = "zerogate.train") -> list[str]:
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


def remove_shm_buffers(port: int, shm: Path = SHM) -> list[Path]:
    """Delete DeepSpeed's shared-memory all-reduce buffers of the run that used ``port``.

    On the CPU accelerator DeepSpeed's shm comm op creates one 69 MB file per rank in /dev/shm, named after
    the master address and port, and never removes it (DeepSpeed 0.19.8, on normal exits too). /dev/shm is
    RAM: about a hundred runs leaked 13 GB here and the next training run was killed for memory.
    """
    leaked = sorted(shm.glob(f"deepspeed_allreduce_buffer_*_{MASTER_ADDR}_{port}_*"))
    for path in leaked:
        path.unlink(missing_ok=True)
    return leaked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-spec", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--module", default="zerogate.train", help="what the launcher runs on each rank")
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.run_spec).read_text())
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    port = free_port()
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
            remove_shm_buffers(port)
    if code != 0:
        print(f"zerogate: training failed (launcher exit code {code}); see {args.log}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
