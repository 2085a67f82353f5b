"""A claim as data (a claim file: config/claims/<name>.yaml, or any path given as ``--config claim=PATH``),
typed: where it was published (``source``), the claimed box planned on paper, and one entry per statement,
of one of the kinds zerogate.analysis.claims judges (discriminated on ``kind``), each with the keys its judge
reads. config/schemas/claims.schema.json is generated from :class:`ClaimsFile`; docs/claims.md teaches
writing one. The seed's own claim is config/claims/seed.yaml, the default.

Numbers keep the type the file gives them (an int stays an int: zerogate.config.base.Number), so a verdict
quotes a stated figure as the claim writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from zerogate.config.base import Int, Number, OptionalNumber, Settings, Str, setting
from zerogate.config.profile import profile_path
from zerogate.config.tables import read_yaml
from zerogate.config.validation import build
from zerogate.errors import InputError

CLAIMS_DIR = "config/claims"
# The claim judged when none is named (config key ``claim``), and the value that names none.
DEFAULT_CLAIM = "seed"
NO_CLAIM = "none"
CLAIMS_FILE = f"{CLAIMS_DIR}/{DEFAULT_CLAIM}.yaml"
Unit = Literal["GB", "GiB", "s", "ratio"]
Scheme = Literal["ddp", "zero1", "zero2", "zero3"]


class ClaimedBoxSpec(Settings):
    """``claimed_box``: the box the claims are about, planned on paper (only when the claim is judged)."""

    profile: Str = setting(
        "the claim's model and setup: a profile name under config/profiles/, or a profile path ending in "
        ".yaml, planned on paper for the claimed box"
    )
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


class FitsClaim(ClaimEntry):
    """The claimed profile's run can be held by the claimed box: the planner's fit (every memory check, the
    devices' and the host's) on paper."""

    kind: Literal["fits"] = setting("the kind of check")


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
    | FitsClaim
    | ConvergenceClaim
    | HardwareClaim
    | NotTestedClaim,
    Field(discriminator="kind"),
]


class ClaimsFile(Settings):
    """A claim's statements as data (config/claims/<name>.yaml), judged by zerogate.analysis.claims. Each
    statement is written in English with its original number and unit, with the kind of check that judges
    it; ``source`` says where the claim was published."""

    source: Str = setting(
        "where the claim was published, for a reader to open: a URL, or a file of this repository",
        min_length=1,
    )
    claimed_box: ClaimedBoxSpec
    claims: list[Claim] = setting("the statements, each judged on paper and measured here", min_length=1)


def claims_file(data: object, file: str = CLAIMS_FILE) -> ClaimsFile:
    """``data`` (the parsed YAML) as the typed claims; InputError naming ``file`` and the dotted key."""
    return build(ClaimsFile, data, lambda key: file)


def read_claims(path: str | Path, file: str | None = None) -> ClaimsFile:
    """The claims at ``path`` (``file``: the name errors give, as the user wrote it)."""
    shown = file or str(path)
    return claims_file(read_yaml(path, shown), shown)


def claim_file(claim: str) -> str | None:
    """The claim file a ``claim`` config value names (repository-relative): a name in config/claims/
    (without .yaml) or a path ending in .yaml; None for ``none`` (no claim is judged)."""
    if claim == NO_CLAIM:
        return None
    return claim if claim.endswith((".yaml", ".yml")) else f"{CLAIMS_DIR}/{claim}.yaml"


def claim_name(file: str) -> str:
    """The name a claim's results are filed under (claims/<name>/ in a run's results): its file's stem."""
    return Path(file).stem


def load_claim(repo: Path, claim: str, asked_by: str) -> ClaimsFile | None:
    """The claim the config value ``claim`` names, checked whole before any job: the file is there
    (InputError naming ``asked_by``, the config file or the command line, and the key ``claim``), it is a
    claim file (naming the file and the dotted key), and the claimed box's description and profile exist
    (naming the file and ``claimed_box.machine`` or ``claimed_box.profile``). None for ``none``."""
    file = claim_file(claim)
    if file is None:
        return None
    if not (repo / file).is_file():
        known = ", ".join(sorted(p.stem for p in (repo / CLAIMS_DIR).glob("*.yaml"))) or "none"
        raise InputError(asked_by, "claim", f"no such claim file: {file} (shipped: {known}; or none)")
    claims = claims_file(read_yaml(repo / file, file), file)
    box = claims.claimed_box
    if not (repo / box.machine).is_file():
        raise InputError(file, "claimed_box.machine", f"no such file: {box.machine}")
    profile = profile_path(repo / "config" / "profiles", box.profile)
    if not profile.is_file():
        raise InputError(file, "claimed_box.profile", f"no such profile: {box.profile}")
    return claims
