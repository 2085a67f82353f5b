"""The micro-benchmarks timed by as many processes at once as the run has ranks on this host, each with a
rank's threads, pooled into one file (:func:`measure_together`).

A run's ranks on one host share its cores, caches and memory bandwidth, and run the same work at the same
time (their collectives keep them in step). A product or a memory-bound chain timed by one process alone can
run faster than the same work beside its twin: the rate a ledger needs is the one a rank gets while every
rank of the host works. So on the CPU accelerator (where the ranks' compute is the host's) the rule's process
forks one companion per other rank of the host before torch is imported, every process times every benchmark
in lockstep (zerogate.runtime.microbench.in_lockstep with :class:`Peers`), and each rate's repeats from every
process are pooled into one spread (:func:`pooled`): its median is a rank's typical rate, its ends the slowest
and fastest repeat of any rank. On a GPU each rank's products run on its own device and are timed alone.

No torch at import: the processes fork before it loads (each imports zerogate.predict.microbench after).
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from threading import BrokenBarrierError
from typing import Any, NamedTuple, TypeVar

from zerogate.contracts.base import Record
from zerogate.contracts.machine import Collectives
from zerogate.contracts.microbench import Microbench, Spread
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.robust import quartiles
from zerogate.runtime.launch import PEER_TIMEOUT_S, LocalWorld, free_port
from zerogate.runtime.nodes import NodeLayout, ranks_on_this_machine


def ranks_on_host(spec: RunSpec) -> int:
    """Processes that time the benchmarks at once: on the CPU accelerator the run's ranks that share this
    machine's cores (zerogate.runtime.nodes.ranks_on_this_machine, as the threads per rank count them), one
    on a GPU."""
    if spec.accelerator != "cpu":
        return 1
    nodes = spec.nodes
    if nodes is None:
        return spec.world_size
    layout = NodeLayout(hosts=tuple(nodes.hosts), ranks_per_node=nodes.ranks_per_node, mode=nodes.mode)
    return ranks_on_this_machine(spec.world_size, layout)


@dataclass
class Peers:
    """One process's handle on the processes timing at once (zerogate.runtime.microbench.Lockstep): a barrier
    of all of them, each one's proposed count, and the port their torch.distributed world meets at (the
    synthetic stacks' engines run in one world of them all:
    zerogate.predict.microbench.module_overhead_rows)."""

    rank: int
    barrier: Barrier
    proposals: Any  # multiprocessing.Array("i", processes)
    port: int

    def world(self) -> LocalWorld:
        return LocalWorld(self.rank, len(self.proposals), self.port)

    def agree(self, count: int) -> int:
        self.proposals[self.rank] = count
        self.barrier.wait(PEER_TIMEOUT_S)
        agreed = min(self.proposals)
        self.barrier.wait(PEER_TIMEOUT_S)  # nobody proposes again before everybody has read
        return int(agreed)


Measured = tuple[Microbench, str]  # the file, and what DeepSpeed's op loading printed meanwhile


def measure_in_step(
    peers: Peers | None, spec: RunSpec, config: DsConfig, collectives: Collectives | None, source: str
) -> Measured:
    """zerogate.predict.microbench.measure in this process, in lockstep with ``peers`` (None: alone)."""
    # Imported here: torch loads with it, after the fork and with the rank's environment set.
    from zerogate.predict.microbench import measure
    from zerogate.runtime.microbench import Alone, in_lockstep
    from zerogate.runtime.probe import captured_output

    world = LocalWorld() if peers is None else peers.world()
    with in_lockstep(peers or Alone()), captured_output() as output:
        return measure(spec, config, collectives, source, world), output()


class Failure(NamedTuple):
    """Where the measurement failed, its error in one line, and its traceback."""

    where: str
    error: str
    trace: str


def failure(where: str, error: BaseException) -> Failure:
    return Failure(where, f"{type(error).__name__}: {error}", traceback.format_exc())


def _companion(peers: Peers, measured: Callable[[Peers], Measured], send: Connection) -> None:
    """A forked companion: its measurement, or its failure, sent back; the barrier broken on a failure so
    that nobody waits for it."""
    try:
        bench, chatter = measured(peers)
        send.send((bench.as_json(), chatter))
    except BaseException as error:
        peers.barrier.abort()
        send.send(failure(f"companion {peers.rank}", error))
    finally:
        send.close()


def first_cause(failures: list[Failure]) -> Failure:
    """The failure that broke the lockstep: the first that is not another process's broken barrier."""
    return next((f for f in failures if not f.error.startswith(BrokenBarrierError.__name__)), failures[0])


def measure_together(
    spec: RunSpec, config: DsConfig, collectives: Collectives | None, source: str, processes: int
) -> Measured:
    """The micro-benchmarks timed by ``processes`` processes at once (this one and forked companions),
    pooled (:func:`pooled`), with every process's printed output. A failure in any process raises
    RuntimeError naming the process where it started."""
    if processes <= 1:
        return measure_in_step(None, spec, config, collectives, source)
    if "torch" in sys.modules:
        raise RuntimeError("the micro-benchmarks' companions fork before torch is imported, and it is loaded")
    context = multiprocessing.get_context("fork")
    barrier, proposals, port = context.Barrier(processes), context.Array("i", processes), free_port()

    def measured(peers: Peers) -> Measured:
        return measure_in_step(peers, spec, config, collectives, source)

    companions = []
    for rank in range(1, processes):
        receive, send = context.Pipe(duplex=False)
        peers = Peers(rank, barrier, proposals, port)
        process = context.Process(target=_companion, args=(peers, measured, send), daemon=True)
        process.start()
        send.close()
        companions.append((process, receive))
    failures: list[Failure] = []
    try:
        own = measured(Peers(0, barrier, proposals, port))
    except Exception as error:
        barrier.abort()
        failures.append(failure("this process", error))
    except BaseException:  # interrupted: the companions go with it
        barrier.abort()
        for process, _ in companions:
            process.terminate()
        raise
    others = []
    for rank, (process, receive) in enumerate(companions, start=1):
        try:
            reply = receive.recv()
        except EOFError:
            reply = None
        process.join()
        if isinstance(reply, tuple) and not isinstance(reply, Failure):
            others.append(reply)
        else:
            failures.append(reply or Failure(f"companion {rank}", f"exited with {process.exitcode}", ""))
    if failures:
        cause = first_cause(failures)
        raise RuntimeError(f"the micro-benchmarks failed in {cause.where}: {cause.error}\n{cause.trace}")
    benches = [own[0], *(Microbench.parse(data, "a companion's micro-benchmarks") for data, _ in others)]
    chatter = "\n".join(text for text in [own[1], *(text for _, text in others)] if text.strip())
    return pooled(benches), chatter


def pooled_spread(spreads: Sequence[Spread]) -> Spread:
    """One rate's repeats from every process as one spread: quartiles of them all, the samples in process
    order, the median of the processes' shares of their cores."""
    samples = [sample for spread in spreads for sample in spread.samples]
    q1, median, q3 = quartiles(samples)
    shares = [spread.cpu_share for spread in spreads if spread.cpu_share is not None]
    return Spread(
        median=median,
        q1=q1,
        q3=q3,
        samples=samples,
        cpu_share=round(statistics.median(shares), 3) if shares else None,
    )


R = TypeVar("R", bound=Record)


# Fields of a matrix product's row that follow from its rate (flop over the median), so differ by process.
FROM_THE_RATE = frozenset({"seconds_per_call"})


def pooled_rows(rows: Sequence[Sequence[R]], spread_field: str, what: str) -> list[R]:
    """Each row of the first process with its ``spread_field`` pooled over the same row of every process;
    the rows must be the same benchmarks in the same order (they are, every process timing the same run):
    alike in every field but the spread and what follows from it (FROM_THE_RATE)."""
    first = rows[0]
    if any(len(other) != len(first) for other in rows):
        raise ValueError(f"the processes timed different numbers of {what}")
    out = []
    for index, row in enumerate(first):
        twins = [process_rows[index] for process_rows in rows]
        described = [twin.model_dump(exclude={spread_field, *FROM_THE_RATE}) for twin in twins]
        if any(description != described[0] for description in described):
            raise ValueError(f"the processes timed different {what} at row {index}")
        spread = pooled_spread([getattr(twin, spread_field) for twin in twins])
        out.append(row.model_copy(update={spread_field: spread}))
    return out


def pooled(benches: Sequence[Microbench]) -> Microbench:
    """The processes' micro-benchmarks as one file: every rate pooled over the processes (each product's
    seconds per call at the pooled median), the wall time the longest, the share of the cores the median of
    every rate's (the timed repeats': a process waiting for the others at a rate's start is not timing)."""
    first = benches[0]
    matmuls = [
        row.model_copy(update={"seconds_per_call": row.flop_per_call / row.rate.median})
        for row in pooled_rows([b.matmuls for b in benches], "rate", "matrix products")
    ]
    copies = pooled_rows([b.copies for b in benches], "rate", "copies")
    optimizer = pooled_rows([b.optimizer for b in benches], "rate", "updates")
    stacks = pooled_rows([b.module_overhead for b in benches], "time", "module stacks")
    chains = pooled_rows([b.operator_chains for b in benches], "time", "operator chains")
    spreads = [r.rate for r in [*matmuls, *copies, *optimizer]] + [r.time for r in [*stacks, *chains]]
    shares = [spread.cpu_share for spread in spreads if spread.cpu_share is not None]
    return first.model_copy(
        update={
            "matmuls": matmuls,
            "copies": copies,
            "optimizer": optimizer,
            "module_overhead": stacks,
            "operator_chains": chains,
            "ranks_at_once": len(benches),
            "seconds_s": max(b.seconds_s for b in benches),
            "cpu_share": round(statistics.median(shares), 3) if shares else None,
            "how": f"{first.how}; timed by {len(benches)} processes at once, as the run's ranks on this "
            "host, every rate's repeats pooled",
        }
    )
