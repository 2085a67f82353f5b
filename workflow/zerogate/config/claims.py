"""The seed's statements as data (config/claims.yaml), typed: the claimed box planned on paper, and one entry
per claim, of one of the kinds zerogate.analysis.claims judges (discriminated on ``kind``), each with the
keys its judge reads. config/schemas/claims.schema.json is generated from :class:`ClaimsFile`.

Numbers keep the type the file gives them (an int stays an int: zerogate.config.base.Number), so a verdict
quotes a stated figure as the claim writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from zerogate.config.base import Int, Number, OptionalNumber, Settings, Str, setting
from zerogate.config.tables import read_yaml
from zerogate.config.validation import build

CLAIMS_FILE = "config/claims.yaml"
Unit = Literal["GB", "GiB", "s", "ratio"]
Scheme = Literal["ddp", "zero1", "zero2", "zero3"]


class ClaimedBoxSpec(Settings):
    """``claimed_box``: the box the claims are about, planned on paper."""

    profile: Str = setting("profile under config/profiles/ planned on paper for the claimed box")
    machine: Str = setting("machine description (config/machines/<name>.yaml) of the claimed box")


class StatedFigure(Settings):
    """A figure as the claim states it, with the unit and, for a per-rank figure, the Phi and N it is at."""

    value: Number = setting("the stated number")
    unit: Unit | None = setting("its unit (GB = 10^9 bytes, GiB = 2^30 bytes, exactly as written)", None)
    phi: OptionalNumber = setting("the parameter count the figure is at", None)
    ranks: Int | None = setting("the data-parallel ranks N the figure is at", None, ge=1)


class StatedGpu(Settings):
    """A card as the claim names it."""

    name: Str = setting("the card's name, as found in the machine description's GPU names")
    memory: Number = setting("its memory, in unit")
    unit: Literal["GB", "GiB"] = setting("the memory's unit")


class ClaimEntry(Settings):
    """What every claim states: its id and the statement with its original number and unit."""

    id: Str = setting("snake_case id", pattern=r"^[a-z0-9_]+$")
    statement: Str = setting("the statement in the claim's words", min_length=1)


class ArithmeticClaim(ClaimEntry):
    """bytes_per_parameter x phi, against the stated figure of each term in its unit."""

    kind: Literal["arithmetic"] = setting("the kind of check")
    phi: Number = setting("the parameter count", gt=0)
    terms: dict[str, Number] = setting("term -> bytes per parameter")
    stated: dict[str, Number] = setting("term (or total) -> the stated figure, in unit")
    unit: Unit = setting("the unit of the stated figures")


class LedgerFormulaClaim(ClaimEntry):
    """replicated*Phi + sharded*Phi/N against the stated figure, DeepSpeed's estimator, zerogate's accounting
    on the claimed box, and the model-state bytes each rank held in this run."""

    kind: Literal["ledger_formula"] = setting("the kind of check")
    scheme: Scheme = setting("the data-parallel scheme the formula is for")
    replicated: Number = setting("bytes per parameter every rank holds", ge=0)
    sharded: Number = setting("bytes per parameter split over the N ranks", ge=0)
    stated: StatedFigure | None = setting("the stated figure, if the claim gives one", None)


class OffloadFormulaClaim(ClaimEntry):
    """The ZeRO-3 + Offload line: its arithmetic, and which offload it describes."""

    kind: Literal["offload_formula"] = setting("the kind of check")
    sharded: Number = setting("bytes per parameter split over the N ranks on the GPU", ge=0)
    stated: StatedFigure = setting("the stated figure")


class CommunicationClaim(ClaimEntry):
    """The volume ratio on paper; measured from the communication tables (comms/volume.json)."""

    kind: Literal["communication"] = setting("the kind of check")
    ddp_volume: Number = setting("DDP's volume per step, in Phi", gt=0)
    zero3_volume: Number = setting("ZeRO-3's volume per step, in Phi", gt=0)
    stated: StatedFigure = setting("the stated ratio")


class StepTimeClaim(ClaimEntry):
    """The planner's floor for the claimed box; this run's step-time gate."""

    kind: Literal["step_time"] = setting("the kind of check")
    stated: StatedFigure = setting("the stated step time")
    gate: Str = setting("the profile's gate that measures it")


class PeakMemoryClaim(ClaimEntry):
    """The planner's peak for the claimed box's smallest card; this run's peak-memory gate."""

    kind: Literal["peak_memory"] = setting("the kind of check")
    stated: StatedFigure = setting("the stated peak")
    gate: Str = setting("the profile's gate that measures it")


class ConvergenceClaim(ClaimEntry):
    """This run's convergence and non-finite gates and its length."""

    kind: Literal["convergence"] = setting("the kind of check")
    steps: Int = setting("the optimizer steps claimed", ge=1)
    gates: list[Str] = setting("the profile's gates that judge it")


class HardwareClaim(ClaimEntry):
    """A fact about the named hardware, from the claimed box's description and its source."""

    kind: Literal["hardware"] = setting("the kind of check")
    gpus: list[StatedGpu] = setting("the cards the claim names")


class NotTestedClaim(ClaimEntry):
    """A statement this pipeline has no experiment for."""

    kind: Literal["not_tested"] = setting("the kind of check")
    why: Str = setting("why it is not tested")


Claim = Annotated[
    ArithmeticClaim
    | LedgerFormulaClaim
    | OffloadFormulaClaim
    | CommunicationClaim
    | StepTimeClaim
    | PeakMemoryClaim
    | ConvergenceClaim
    | HardwareClaim
    | NotTestedClaim,
    Field(discriminator="kind"),
]


class ClaimsFile(Settings):
    """The seed's statements as data (config/claims.yaml), judged by zerogate.analysis.claims. Each claim
    names the statement in English with its original number and unit, and the kind of check that judges
    it."""

    claimed_box: ClaimedBoxSpec
    claims: list[Claim] = setting("the statements, each judged on paper and measured here", min_length=1)


def claims_file(data: object, file: str = CLAIMS_FILE) -> ClaimsFile:
    """``data`` (the parsed YAML) as the typed claims; InputError naming ``file`` and the dotted key."""
    return build(ClaimsFile, data, lambda key: file)


def read_claims(path: str | Path, file: str | None = None) -> ClaimsFile:
    """The claims at ``path`` (``file``: the name errors give, as the user wrote it)."""
    shown = file or str(path)
    return claims_file(read_yaml(path, shown), shown)
