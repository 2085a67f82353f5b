"""The training settings: the profile's stabiliser and checkpoint settings, with their defaults filled in."""

from __future__ import annotations

from typing import Any

from zerogate.train import checkpoint, stabiliser


def training_settings(profile: dict[str, Any]) -> dict[str, Any]:
    return {
        "stabiliser": stabiliser.settings(profile.get("stabiliser")),
        "checkpoint": checkpoint.settings(profile.get("checkpoint")),
    }
