"""The run a rendered config describes, as the planner sees it: its model counted on the meta device, the
ledger's setup read from the config, and the activation source traced from the model."""

from __future__ import annotations

from typing import NamedTuple

from zerogate.contracts.model import ModelCounts
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.predict.activations import TracedActivations
from zerogate.predict.setup import Setup, setup_from_config


class PlannedRun(NamedTuple):
    """What every prediction of a run starts from."""

    counts: ModelCounts  # the model's parameters, counted on the meta device
    setup: Setup  # the ledger's view of the rendered config
    activations: TracedActivations  # the activation source traced from the model


def run_setup(run_spec: RunSpec, ds_config: DsConfig, nodes: int = 1) -> PlannedRun:
    """The run's model counted on the meta device, the ledger's view of its rendered config, and the
    activation source traced from the model (zerogate.predict.activations.TracedActivations; each trace runs
    once a process, zerogate.predict.trace.trace_micro_step). ``nodes``: the machine's, where the run spec
    names none (several nodes as rendered from a profile's nodes section: each node holds its share of the
    ranks)."""
    config = planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len)
    counts = count_parameters(config)
    nodes = len(run_spec.nodes.hosts) if run_spec.nodes else nodes
    return PlannedRun(counts, setup_from_config(ds_config, run_spec, nodes=nodes), TracedActivations(config))
