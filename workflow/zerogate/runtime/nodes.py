"""Where the ranks run: one node, or several through DeepSpeed's own multi-node launcher.

A profile's ``nodes`` section (absent: one node) names a DeepSpeed hostfile (``<host> slots=<n>`` per
line, parsed by DeepSpeed's own parser) and how the per-node launchers start:

- ``no_ssh``: ``deepspeed --no_ssh --node_rank <i>`` on each node, all meeting at ``master_addr``. This
  machine starts the launchers of the hostfile's hosts that are this machine (its host name,
  ``localhost``, a loopback address); any other node runs ``python -m zerogate.runtime.launch ...
  --node-rank <i>`` itself. Two names of this machine in the hostfile give two nodes on one machine,
  which is how the multi-node path is tested here.
- ``slurm``: inside a Slurm allocation, one ``deepspeed --launcher slurm`` (DeepSpeed's backend runs
  ``srun`` for every rank); the ranks map ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` to torch's
  variables (:func:`rank_env_from_slurm`).

Everything here is checked before anything launches: a host named twice (DeepSpeed refuses it), a node
count that does not match the hostfile or the Slurm allocation, ranks per node above the node's devices.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zerogate.errors import InputError

MODES = ("no_ssh", "slurm")
# The rendezvous address of a one-machine run (DeepSpeed's launcher default; DeepSpeed's CPU shm buffers
# are named after it), and how long a rank waits in a collective for a dead peer: the defaults the
# profile schema states for nodes.master_addr and nodes.collective_timeout_s.
LOCAL_MASTER_ADDR = "127.0.0.1"
COLLECTIVE_TIMEOUT_S = 300.0
LOCAL_NAMES = {"localhost", LOCAL_MASTER_ADDR, "::1"}


@dataclass(frozen=True)
class NodeLayout:
    """The nodes of a run and the ranks on each. ``hosts`` in hostfile order: node rank = index."""

    hosts: tuple[str, ...] = ("localhost",)
    ranks_per_node: int = 1
    mode: str = "single"  # "single" | "no_ssh" | "slurm"
    hostfile: str | None = None
    master_addr: str = LOCAL_MASTER_ADDR
    slots: Mapping[str, int] = field(default_factory=dict)
    collective_timeout_s: float | None = None  # None: torch's default (30 min)

    @property
    def count(self) -> int:
        return len(self.hosts)

    @property
    def world_size(self) -> int:
        return self.count * self.ranks_per_node

    @property
    def multi_node(self) -> bool:
        return self.mode != "single"

    def node_of(self, rank: int) -> tuple[int, int]:
        """(node rank, local rank) of a global rank: DeepSpeed numbers ranks node by node."""
        return divmod(rank, self.ranks_per_node)


def read_hostfile(path: str | Path, file: str, key: str = "nodes.hostfile") -> dict[str, int]:
    """Host -> slots, through DeepSpeed's own hostfile parser (the one its launcher uses); its refusals as
    one line naming the file."""
    # Here, not at the top: the Snakefile imports this module (zerogate.render.ds_config) to build the DAG.
    from deepspeed.launcher.runner import _parse_hostfile

    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise InputError(file, key, f"cannot read hostfile {path}: {error.strerror}") from None
    try:
        return dict(_parse_hostfile(lines))
    except ValueError as error:
        raise InputError(file, key, f"{path}: {str(error).split(', unable to proceed')[0]}") from None


def is_this_machine(host: str, hostname: str | None = None) -> bool:
    hostname = hostname or socket.gethostname()
    return host in LOCAL_NAMES or host.startswith("127.") or host in (hostname, hostname.split(".")[0])


def allocation_hosts(env: Mapping[str, str]) -> list[str]:
    """The host names of the Slurm allocation this process runs in (``scontrol show hostnames``)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        return []
    shown = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return shown.stdout.split()


def layout(
    section: Mapping | None,
    file: str,
    repo: Path,
    devices_per_node: int | None,
    env: Mapping[str, str] | None = None,
    hostfile_out: Path | None = None,
) -> NodeLayout:
    """The run's node layout from the profile's ``nodes`` section (None: one node), checked.

    ``devices_per_node``: accelerator devices of a node (None on the CPU accelerator, where ranks are
    processes and any count runs). ``env``: given inside the run's Slurm allocation (at launch), where the
    allocation is checked against the layout and, without a hostfile, becomes it (written to
    ``hostfile_out``); None when rendering, where a hostfile-less slurm layout has ``count`` placeholder
    hosts.
    """
    if not section:
        return NodeLayout()
    mode = section.get("mode", "no_ssh")
    if mode not in MODES:
        raise InputError(file, "nodes.mode", f"{mode!r} is not one of {', '.join(MODES)}")
    ranks = int(section.get("ranks_per_node", 1))
    wanted = section.get("count")
    hostfile = section.get("hostfile")
    if hostfile is not None:
        slots = read_hostfile(repo / hostfile, file)
        hostfile_path: str | None = str(repo / hostfile)
    elif mode != "slurm":
        raise InputError(
            file, "nodes.hostfile", "mode no_ssh needs a hostfile (one '<host> slots=<n>' line per node)"
        )
    elif env is not None:  # slurm, at launch: the allocation is the hostfile
        slots = {host: ranks for host in allocation_hosts(env)}
        if hostfile_out is None:
            raise ValueError("a slurm layout without a hostfile needs hostfile_out at launch")
        hostfile_out.write_text("".join(f"{host} slots={n}\n" for host, n in slots.items()))
        hostfile, hostfile_path = str(hostfile_out), str(hostfile_out)
    elif wanted is None:
        raise InputError(
            file, "nodes.count", "mode slurm without a hostfile needs count (the allocation's nodes)"
        )
    else:  # slurm, when rendering: the hosts are known only inside the allocation
        slots, hostfile_path = {f"node{i}": ranks for i in range(wanted)}, None
    hosts = tuple(slots)
    if wanted is not None and wanted != len(hosts):
        raise InputError(file, "nodes.count", f"{wanted} nodes, but hostfile {hostfile} lists {len(hosts)}")
    short = {host: n for host, n in slots.items() if n < ranks}
    if short:
        host, n = next(iter(short.items()))
        raise InputError(
            file, "nodes.ranks_per_node", f"{ranks} ranks per node, but {hostfile} gives {host} {n} slot(s)"
        )
    if devices_per_node is not None and ranks > devices_per_node:
        raise InputError(
            file,
            "nodes.ranks_per_node",
            f"{ranks} ranks per node, but a node has {devices_per_node} device(s)",
        )
    if mode == "slurm" and env is not None:
        allocated = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
        if allocated is None:
            raise InputError(
                file, "nodes.mode", "slurm: not inside a Slurm allocation (no SLURM_JOB_NUM_NODES)"
            )
        if int(allocated) != len(hosts):
            raise InputError(
                file,
                "nodes.hostfile",
                f"the Slurm allocation has {allocated} node(s), hostfile {hostfile} lists {len(hosts)}",
            )
    return NodeLayout(
        hosts=hosts,
        ranks_per_node=ranks,
        mode=mode,
        hostfile=hostfile_path,
        master_addr=section.get("master_addr", LOCAL_MASTER_ADDR),
        slots=slots,
        collective_timeout_s=float(section.get("collective_timeout_s", COLLECTIVE_TIMEOUT_S)),
    )


def local_nodes(nodes: NodeLayout) -> int:
    """How many of the layout's nodes are this machine (their ranks share its cores)."""
    if nodes.mode != "no_ssh":
        return 1
    return sum(is_this_machine(host) for host in nodes.hosts) or 1


def ranks_on_this_machine(ranks: int, nodes: NodeLayout) -> int:
    """The run's ranks that share this machine's cores: all ``ranks`` on one node; on several, those of the
    nodes that are this machine (two local nodes in the tests, one on a real cluster)."""
    return nodes.ranks_per_node * local_nodes(nodes) if nodes.multi_node else ranks


def launcher_commands(
    nodes: NodeLayout,
    deepspeed: str,
    port: int,
    module: str,
    train_args: list[str],
    node_ranks: list[int] | None = None,
) -> dict[int, list[str]]:
    """Node rank -> the ``deepspeed`` command this machine runs for it.

    One node: the plain local launch. ``no_ssh``: one launcher per node rank that is this machine (or
    those given). ``slurm``: one launcher whose backend starts every rank with srun.
    """
    common = ["--master_port", str(port), "--module", module, *train_args]
    if not nodes.multi_node:
        return {0: [deepspeed, "--num_gpus", str(nodes.ranks_per_node), *common]}
    if nodes.hostfile is None:
        raise ValueError("a multi-node launch needs the hostfile (at launch, a slurm layout writes one)")
    multi = [
        deepspeed,
        "--hostfile",
        str(nodes.hostfile),
        "--num_nodes",
        str(nodes.count),
        "--num_gpus",
        str(nodes.ranks_per_node),
        "--master_addr",
        nodes.master_addr,
    ]
    if nodes.mode == "slurm":
        return {0: [*multi, "--launcher", "slurm", "--force_multi", "--no_ssh_check", *common]}
    if node_ranks is None:
        node_ranks = [i for i, host in enumerate(nodes.hosts) if is_this_machine(host)]
    return {i: [*multi, "--no_ssh", "--node_rank", str(i), *common] for i in node_ranks}


def node_log(log: Path, node: int) -> Path:
    """The launcher log of node ``node``: the rule's log for node 0, ``<stem>.node<i><suffix>`` beside it
    for the others (parse_logs reads them all)."""
    return log if node == 0 else log.with_name(f"{log.stem}.node{node}{log.suffix}")


def node_logs(log: Path) -> list[Path]:
    """Every launcher log of a run: node 0's and those of the other nodes found beside it, in node order."""
    others = sorted(
        log.parent.glob(f"{log.stem}.node*{log.suffix}"),
        key=lambda path: int(path.stem.rsplit(".node", 1)[1]),
    )
    return [log, *others]


def rank_env_from_slurm(env: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed's variables from srun's, for ranks DeepSpeed's slurm backend started (it sets
    MASTER_ADDR/MASTER_PORT but leaves RANK, WORLD_SIZE and LOCAL_RANK to the script). Empty when the
    launcher already set them or the process is not an srun task."""
    if "RANK" in env or "SLURM_PROCID" not in env:
        return {}
    return {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": env["SLURM_NTASKS"],
        "LOCAL_RANK": env["SLURM_LOCALID"],
    }
