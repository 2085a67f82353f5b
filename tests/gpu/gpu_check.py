"""The GPU check in one device call: install the kit (make gpu-kit: build/gpu-kit/, docs/gpu-kit.md), then
run tests/gpu/check_runs.py, which builds DeepSpeed's ops, trains the short runs and writes the results.

    python3 tests/gpu/gpu_check.py --kit build/gpu-kit --out "$OUT"     # on the lent GPU machine
    python tests/gpu/gpu_check.py --cpu --out /tmp/gpu-check             # here: a tiny model, CPU accelerator

Only the standard library at the top: on the GPU machine's bare image zerogate's own needs (pydantic,
DeepSpeed) arrive with the kit, which is installed (``pip install --no-index --no-deps --target``) into a
folder the runs then find first on PYTHONPATH, ahead of the image's packages (so the kit's transformers, at
the project's pin, wins over the image's). The wall-clock budget starts here: what the install spends is
taken from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Seconds the whole check may take, on each kind of machine: a device call runs at most 10 minutes, the
# issue asks for under 8 (machine start and transfers excluded); the CPU mode is a test of the suite's.
BUDGET_S = {"cuda": 420.0, "cpu": 150.0}


def install_kit(kit: Path, site: Path) -> dict:
    """Install every wheel of ``kit`` into ``site``, nothing fetched, nothing resolved (the kit's check did
    that): seconds, wheels, exit status and the output's tail."""
    wheels = sorted(str(path) for path in kit.glob("*.whl"))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
        + ["--no-cache-dir", "--upgrade", "--target", str(site), *wheels],
        capture_output=True,
        text=True,
    )
    return {
        "kit": str(kit),
        "wheels": len(wheels),
        "seconds": round(time.monotonic() - started, 1),
        "returncode": done.returncode,
        "output_tail": (done.stdout + done.stderr)[-2000:],
    }


def runs_env(site: Path | None) -> dict[str, str]:
    """The environment of the runs: the kit's folder (if any) first, then the package and the repository."""
    paths = [str(site)] * (site is not None) + [str(REPO / "workflow"), str(REPO)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(":"),
    }
    if site is not None:
        env["PATH"] = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="the result files go here (at most 8)")
    parser.add_argument("--cpu", action="store_true", help="CPU mode: tiny model, fp32, gloo, no CUDA")
    parser.add_argument("--kit", type=Path, help="the kit's folder, installed first (GPU machine)")
    parser.add_argument("--budget-s", type=float, help="wall-clock budget (default: BUDGET_S)")
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the runs' folder (its path is printed)"
    )
    args, rest = parser.parse_known_args(argv)
    budget = args.budget_s or BUDGET_S["cpu" if args.cpu else "cuda"]
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="zerogate-gpu-check-"))
    print(f"gpu_check: rendered files, dataset and run outputs in {work}")
    site, install = None, None
    if args.kit is not None:
        site = work / "site"
        install = install_kit(args.kit, site)
        shown = {k: v for k, v in install.items() if k != "output_tail"}
        print(f"gpu_check: kit installed: {json.dumps(shown)}")
    (work / "install.json").write_text(json.dumps(install))
    command = [sys.executable, "-m", "tests.gpu.check_runs", "--out", str(args.out), "--work", str(work)]
    command += ["--deadline", str(started + budget), "--budget-s", str(budget)]
    command += ["--install-record", str(work / "install.json")] + ["--cpu"] * args.cpu
    if args.kit is not None:
        command += ["--kit-record", str(args.kit / "kit.json")]
    try:
        return subprocess.run([*command, *rest], cwd=REPO, env=runs_env(site)).returncode
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
