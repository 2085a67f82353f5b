"""A plan request: the plan_model target's arguments (``--config model=... box=...``, or ``make plan MODEL=...
BOX=...``) read into what the planner needs, each bad one refused in one line naming the argument, while
the workflow loads; and the request written back as the one command that plans it (what a suggestion
prints). The neutral base every request starts from (config/plan_base.yaml) is read here too.

Pure Python: no torch, no transformers (the Snakefile imports this while it builds the DAG)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogate.config.boxes import box_from_text
from zerogate.config.host_cpus import HOST_CPUS_FILE, close_cpu_names, host_memory, with_host_memory
from zerogate.config.machines import MachineDescription, check, load_description
from zerogate.config.run_config import RunConfig
from zerogate.config.tables import read_yaml
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.errors import InputError
from zerogate.units import GIB, parse_bytes

SHIPPED_MODELS = Path("config/models")
BASE_FILE = "config/plan_base.yaml"
# The command-line keys of a request (RunConfig's plan_model keys) and the make variable of each.
KEYS = {
    "model": "MODEL",
    "box": "BOX",
    "host_ram": "HOST_RAM",
    "host_cpu": "HOST_CPU",
    "zero": "ZERO",
    "offload": "OFFLOAD",
    "micro_batch": "MICRO_BATCH",
    "accumulation": "ACCUMULATION",
    "seq_len": "SEQ_LEN",
    "checkpointing": "CHECKPOINTING",
    "attention": "ATTENTION",
}
# The offload choices: (optimizer state, parameters) each to "cpu", "nvme" or nowhere (None).
OFFLOADS: dict[str, tuple[str | None, str | None]] = {
    "none": (None, None),
    "optimizer": ("cpu", None),
    "cpu": ("cpu", "cpu"),
    "nvme-optimizer": ("nvme", None),
    "nvme": ("nvme", "nvme"),
}
SOURCE = "--config"


def _error(key: str, problem: str) -> InputError:
    """One line naming the argument as both commands spell it (``model``, ``MODEL``)."""
    return InputError(SOURCE, f"{key} ({KEYS[key]})", problem)


@dataclass(frozen=True)
class PlanBase:
    """config/plan_base.yaml: the DeepSpeed template, the NVMe path and the training a plan sizes."""

    deepspeed_template: str
    nvme_path: str
    training: RunTraining


def read_base(repo: Path, file: str = BASE_FILE) -> PlanBase:
    raw = read_yaml(repo / file, file)
    if not isinstance(raw, dict):
        raise InputError(file, "", "the plan base must be a mapping")
    missing = [k for k in ("deepspeed_template", "nvme_path", "training") if k not in raw]
    if missing:
        raise InputError(file, missing[0], "required")
    return PlanBase(
        deepspeed_template=str(raw["deepspeed_template"]),
        nvme_path=str(raw["nvme_path"]),
        training=typed(RunTraining, raw["training"], file),
    )


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the model's config.json, the box, the ZeRO stage and offload, the geometry per rank.
    ``values``: the arguments as given (what :func:`command` writes back)."""

    values: dict[str, Any]
    model_config: str  # the config.json, as a path from the repository (or absolute)
    model_name: str
    box: MachineDescription
    box_file: str | None  # the description file, when the box is one
    stage: int
    offload: str
    micro_batch: int
    accumulation: int
    seq_len: int
    checkpointing: bool
    attention: str  # auto | sdpa | eager

    @property
    def offload_devices(self) -> tuple[str | None, str | None]:
        """(optimizer state, parameters): "cpu", "nvme" or None (on the device)."""
        return OFFLOADS[self.offload]

    @property
    def key(self) -> str:
        """The plan's directory under results/plans/: model, box, then the settings, so that no two plans
        share one."""
        settings = (
            f"zero{self.stage}-offload-{self.offload}-micro{self.micro_batch}-accum{self.accumulation}"
            f"-seq{self.seq_len}" + ("-checkpointing" if self.checkpointing else "") + f"-{self.attention}"
        )
        return f"{self.model_name}/{self.box.name}/{settings}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "model"


def model_config(given: str, repo: Path) -> tuple[str, str, int | None]:
    """(config.json path, name, its positions) of ``model``: a shipped name (config/models/<name>.json), a
    config.json, or a directory holding one; refused when none is there or it is not a JSON object with a
    model_type."""
    shipped = SHIPPED_MODELS / f"{given}.json"
    path = Path(given)
    if "/" not in given and not given.endswith(".json") and (repo / shipped).is_file():
        path, name = shipped, given
    else:
        found = path if path.is_absolute() else repo / path
        if found.is_dir():
            path, found = path / "config.json", found / "config.json"
        if not found.is_file():
            names = sorted(p.stem for p in (repo / SHIPPED_MODELS).glob("*.json"))
            raise _error(
                "model",
                f"no config.json at {given} and no shipped model of that name (shipped: {', '.join(names)})",
            )
        name = path.parent.name if path.name == "config.json" else path.stem
    try:
        raw = json.loads((path if path.is_absolute() else repo / path).read_text())
    except (OSError, ValueError) as error:
        raise _error("model", f"{path} is not valid JSON ({error})") from None
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise _error("model", f"{path} has no model_type (not a transformers config.json)")
    return str(path), _safe(name), positions(raw)


def positions(raw: dict[str, Any]) -> int | None:
    """The positions a config.json states (transformers' max_position_embeddings, GPT-2's n_positions)."""
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(raw.get(key), int):
            return raw[key]
    return None


def box_description(
    given: str, host_ram: Any, repo: Path, short_form: Any = None, host_cpu: str | None = None
) -> tuple[MachineDescription, str | None]:
    """(machine, its file or None) of ``box``: a machine description (a .yaml file), with ``host_ram`` in
    place of its host RAM when given; or a short form such as 2xRTX3090 (zerogate.config.boxes.box_from_text,
    or ``short_form(text, host_ram_bytes)``), its host RAM ``host_ram`` (None: unknown, not checked).
    ``host_cpu`` (``2x AMD EPYC 7742``): the host's CPUs, whose memory the CPU catalogue gives
    (zerogate.config.host_cpus.host_memory), in place of the description's."""
    ram = None
    if host_ram is not None:
        try:
            ram = parse_bytes(host_ram)
        except ValueError as error:
            raise _error("host_ram", str(error)) from None
    memory = host_memory(host_cpu) if host_cpu else None
    if host_cpu and memory is None:
        near = close_cpu_names(host_cpu)
        hint = f"; nearest: {', '.join(near)}" if near else ""
        raise _error(
            "host_cpu",
            f"'{host_cpu}' is not in the host CPU catalogue ({HOST_CPUS_FILE}){hint}; or give the box as a "
            "machine description with host.memory_bandwidth_gbps",
        )
    if given.endswith((".yaml", ".yml")) or (repo / given).is_file():
        if not (repo / given).is_file():
            raise _error("box", f"no such machine description: {given}")
        machine, file = load_description(repo / given), given
    else:
        try:
            machine, file = (short_form or box_from_text)(given, ram), None
        except InputError as error:
            raise _error("box", error.problem) from None
    if ram is None and memory is None:
        return machine, file
    # What is given names the box too, so that plans for two hosts never share a directory.
    described = with_host_memory(machine, memory, replace=True).plain()
    if ram is not None:
        described["host"]["ram_total_bytes"] = ram
        described["name"] = f"{described['name']}-host{ram / GIB:g}GiB"
    if memory is not None:
        described["name"] = f"{described['name']}-{_safe(str(host_cpu))}"
    return check(described, file or given), file


def check_geometry(stage: int, offload: str) -> None:
    """Parameter offload and NVMe need ZeRO-3 (DeepSpeed's offload_param, ZeRO-Infinity); DDP offloads
    nothing."""
    optimizer, params = OFFLOADS[offload]
    if stage == 0 and optimizer:
        raise _error("offload", f"{offload} needs a ZeRO stage (zero=0 is DDP: nothing is offloaded)")
    if stage < 3 and (params or optimizer == "nvme"):
        raise _error(
            "offload", f"{offload} needs zero=3 (DeepSpeed offloads parameters, and to NVMe, in ZeRO-3 only)"
        )


def plan_request(values: dict[str, Any], repo: Path, short_form: Any = None) -> PlanRequest:
    """The request in ``values`` (the run configuration's plan_model keys, validated by its schema);
    InputError naming the argument. ``short_form``: the reader of boxes such as 2xRTX3090 (default
    zerogate.config.boxes.box_from_text)."""
    if not values.get("model"):
        raise _error("model", "required: a config.json, a directory holding one, or a shipped name")
    if not values.get("box"):
        raise _error("box", "required: a machine description (.yaml) or a short form such as 2xRTX3090")
    config, name, most = model_config(str(values["model"]), repo)
    if most is not None and values["seq_len"] > most:
        raise _error("seq_len", f"{values['seq_len']} exceeds the {most} positions of {config}")
    box, box_file = box_description(
        str(values["box"]), values.get("host_ram"), repo, short_form, values.get("host_cpu")
    )
    check_geometry(values["zero"], values["offload"])
    return PlanRequest(
        values={k: values.get(k) for k in KEYS},
        model_config=config,
        model_name=name,
        box=box,
        box_file=box_file,
        stage=values["zero"],
        offload=values["offload"],
        micro_batch=values["micro_batch"],
        accumulation=values["accumulation"],
        seq_len=values["seq_len"],
        checkpointing=values["checkpointing"],
        attention=values["attention"],
    )


def changed(request: PlanRequest, **changes: Any) -> dict[str, Any]:
    """The request's arguments with ``changes`` (keys of KEYS)."""
    unknown = set(changes) - set(KEYS)
    if unknown:
        raise ValueError(f"not a plan argument: {', '.join(sorted(unknown))}")
    return {**request.values, **changes}


def command(values: dict[str, Any]) -> str:
    """The one command that plans ``values``: ``make plan`` with each argument that is not its default."""
    parts = ["make plan"]
    for key, variable in KEYS.items():
        value = values.get(key)
        if value is None or value == RunConfig.model_fields[key].default:
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        text = str(value)
        plain = re.fullmatch(r"[A-Za-z0-9_./:+-]+", text)
        parts.append(f"{variable}={text}" if plain else f"{variable}='{text}'")
    return " ".join(parts)
