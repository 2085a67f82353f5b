"""Where a result came from: pipeline version, git commit, config and its hash, packages, machine, data."""

from __future__ import annotations

import datetime as dt
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogate import __version__
from zerogate.config.profile import measured_profile
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.records import GitState, TrainSummary
from zerogate.contracts.report import DatasetFacts, GitAtStages, MachineFacts, Provenance
from zerogate.hashing import sha256_json


def measurement_hash(profile: dict[str, Any]) -> str:
    """The hash of what a run measures (config.profile.measured_profile) and the pipeline version, as the
    config hash is of the whole profile: equal for runs that differ only in repeats, interval settings or a
    fault injection."""
    return sha256_json({"profile": measured_profile(profile), "pipeline_version": __version__})


def git_state(repo: str | Path) -> dict[str, Any]:
    """Commit and whether tracked files differ from it; nulls outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


@dataclass(frozen=True)
class RunIdentity:
    """What the workflow names a run by: its profile (name and resolved settings), the profile's hash and
    the run id."""

    profile_name: str
    profile: dict[str, Any]
    config_hash: str
    run_id: str


@dataclass(frozen=True)
class RunRecords:
    """What the run's stages recorded that its provenance repeats: the machine's fingerprint, the dataset's
    manifest, the rendered DeepSpeed config and the training summary (the commit it trained at)."""

    fingerprint: Fingerprint
    manifest: DatasetManifest
    ds_config: dict[str, Any]
    summary: TrainSummary


def provenance(identity: RunIdentity, records: RunRecords, repo: str | Path) -> Provenance:
    """The run's provenance, the commit of ``repo`` now as the report's."""
    profile, machine, manifest = identity.profile, records.fingerprint, records.manifest
    return Provenance(
        pipeline_version=__version__,
        run_id=identity.run_id,
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        git=GitAtStages(at_training=records.summary.git, at_report=GitState(**git_state(repo))),
        profile=identity.profile_name,
        config_hash=identity.config_hash,
        measurement_hash=measurement_hash(profile),
        resolved_profile=profile,
        ds_config=records.ds_config,
        packages=machine.versions,
        machine=MachineFacts(
            hostname=machine.hostname,
            platform=machine.platform,
            cpu=machine.cpu,
            ram=machine.ram,
            accelerator=machine.accelerator,
        ),
        dataset=DatasetFacts(
            source=manifest.source, content_sha256=manifest.content_sha256, splits=manifest.splits
        ),
    )
