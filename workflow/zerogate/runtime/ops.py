"""DeepSpeed's compiled CPU ops, built once per virtual environment at set-up, never during a run.

    python -m zerogate.runtime.ops        # `make setup` runs this: CPU Adam, fused Adam, the shm comm op

DeepSpeed compiles its C++ ops the first time a process loads them (torch.utils.cpp_extension under ninja):
about 40 s for the shared-memory comm op and 70 s for each Adam on these 2 cores. Two things made runs
pay that again and again: torch's default build directory (~/.cache/torch_extensions) is shared by every
checkout and virtual environment, whose include paths differ, so each one's build replaced the other's;
and the venv's ninja (1.13) and the system's (1.11) hash the build log's commands differently, so a
process that found the other one first on PATH rebuilt everything. Here the build directory belongs to the
virtual environment and its own ninja comes first on PATH. The workflow puts :func:`build_env` into its
environment, which every job (local or Slurm) and every rank inherits.

On CUDA DeepSpeed compiles for the targets TORCH_CUDA_ARCH_LIST names, and DeepSpeed 0.19.8 reads each as
digits alone (op_builder/builder.py, ``compute_capability_args``): a list naming one of torch's arch-specific
targets ("9.0a", as a GPU image may set it) stops every CUDA op's build with ``ValueError``. :func:`build_env`
gives DeepSpeed such a list with each of those targets as its plain one ("9.0": the same card, without the
instructions only the arch-specific target may use, which DeepSpeed's Adam kernels do not).

Loading a built op still asks py-cpuinfo, which starts an interpreter per question: :func:`keep_cpu_info`,
called before DeepSpeed loads its first op, makes each process ask once.

No torch import at module level: the Snakefile imports this.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

EXTENSIONS_DIR_VARIABLE = "TORCH_EXTENSIONS_DIR"
ARCH_LIST_VARIABLE = "TORCH_CUDA_ARCH_LIST"
# The ops a run can load on DeepSpeed's CPU accelerator: CPU Adam (optimizer offload), the fused Adam
# (ZeRO without optimizer offload: the variants and the communication runs) and the comm op that
# deepspeed.init_distributed loads on the CPU accelerator.
CPU_OPS = ("ShareMemCommBuilder", "CPUAdamBuilder", "FusedAdamBuilder")


def build_env(
    environ: Mapping[str, str] = os.environ, prefix: str = sys.prefix, executable: str = sys.executable
) -> dict[str, str]:
    """The variables to set so that ops build into, and load from, this environment's own directory
    (``<prefix>/torch_extensions``, unless the user chose one) with this environment's ninja."""
    env: dict[str, str] = {}
    arch_list = environ.get(ARCH_LIST_VARIABLE, "")
    if (plain_list := plain_arch_list(arch_list)) != arch_list:
        env[ARCH_LIST_VARIABLE] = plain_list
    if not environ.get(EXTENSIONS_DIR_VARIABLE):
        env[EXTENSIONS_DIR_VARIABLE] = str(Path(prefix) / "torch_extensions")
    bin_dir = str(Path(executable).parent)
    path = environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = os.pathsep.join(p for p in (bin_dir, path) if p)
    return env


def plain_arch_list(arch_list: str) -> str:
    """TORCH_CUDA_ARCH_LIST with each arch-specific target ("9.0a", "10.0f+PTX") as its plain one ("9.0",
    "10.0+PTX"), each target once, separated by ";"; a list without one comes back unchanged."""
    targets = [target for target in arch_list.replace(" ", ";").split(";") if target.strip()]
    plain = []
    for target in targets:
        number, plus, suffix = target.strip().partition("+")
        major, dot, minor = number.partition(".")
        target = major + dot + minor.rstrip("abcdefghijklmnopqrstuvwxyz") + plus + suffix
        if target not in plain:
            plain.append(target)
    return arch_list if plain == targets else ";".join(plain)


def keep_cpu_info() -> None:
    """Make py-cpuinfo answer this process once: each ``cpuinfo.get_cpu_info()`` starts a Python interpreter
    (``cpuinfo.py --json``, which starts one more process for CPUID), about a second each, and DeepSpeed asks
    as it loads ops (``cpu_arch`` and ``simd_width``: the flags it checks a built op against; four times for
    the three CPU ops) and once more in DeepSpeedCPUAdam. The CPU does not change within a process, so the
    first answer is kept; DeepSpeed imports the function at each call, so it finds the kept one. Call it
    before DeepSpeed loads an op (``deepspeed.init_distributed`` loads the comm op on the CPU
    accelerator)."""
    try:
        # Here, not at the top: py-cpuinfo is DeepSpeed's optional dependency.
        import cpuinfo
    except ImportError:  # DeepSpeed then falls back to lscpu itself
        return
    if getattr(cpuinfo.get_cpu_info, "kept_by_zerogate", False):
        return
    first_answer = functools.cache(cpuinfo.get_cpu_info)

    def get_cpu_info() -> dict:
        return dict(first_answer())

    get_cpu_info.kept_by_zerogate = True  # type: ignore[attr-defined]
    get_cpu_info.__wrapped__ = first_answer.__wrapped__  # type: ignore[attr-defined]  # py-cpuinfo's own
    cpuinfo.get_cpu_info = get_cpu_info


def build_cpu_ops(names: tuple[str, ...] = CPU_OPS) -> dict[str, float]:
    """Load (so build, when not built yet) each op on DeepSpeed's CPU accelerator; seconds per op."""
    os.environ.update(build_env())
    os.environ["DS_ACCELERATOR"] = "cpu"
    keep_cpu_info()
    # Here, not at the top: the Snakefile imports this module, and DeepSpeed reads DS_ACCELERATOR (set just
    # above) when it is imported.
    from deepspeed.ops.op_builder import cpu as builders

    seconds = {}
    for name in names:
        started = time.monotonic()
        getattr(builders, name)().load(verbose=False)
        seconds[name] = time.monotonic() - started
    return seconds


def main() -> int:
    for name, seconds in build_cpu_ops().items():
        print(
            f"zerogate: DeepSpeed op {name} ready in {os.environ[EXTENSIONS_DIR_VARIABLE]} ({seconds:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
