"""The probe's own collective timing (zerogate.runtime.collective_timing.batch_seconds, two gloo ranks, one
thread each) at the probe's sizes and at larger full tensors (16 and 64 MiB: beyond a 32 MiB last-level
cache with both ranks' buffers), beside what the probe's line (zerogate.predict.collectives.figures, fitted
on the probe's sizes only) predicts for each size: does the line hold for the messages a grid point sends?"""
import json, os, sys, time
sys.path[:0] = ["workflow", "."]
import torch, torch.distributed as dist, torch.multiprocessing as mp
from zerogate.runtime.collective_timing import batch_seconds
from zerogate.runtime.collectives import BANDWIDTH_BATCH, BANDWIDTH_ELEMENTS, LATENCY_BATCH, LATENCY_ELEMENTS
from zerogate.predict.collectives import figures, predicted_seconds

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
LARGE = (1 << 22, 1 << 24)

def rank(r, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    dist.init_process_group("gloo", rank=r, world_size=2)
    rows = {}
    for kind in KINDS:
        rows[kind] = []
        for elements, batch in [(LATENCY_ELEMENTS, LATENCY_BATCH)] + [(e, BANDWIDTH_BATCH) for e in BANDWIDTH_ELEMENTS + LARGE]:
            means = batch_seconds(kind, elements, 2, *batch)
            rows[kind].append({"elements": elements, "seconds": min(means), "slowest_seconds": max(means)})
    if r == 0:
        json.dump(rows, open(out, "w"))
    dist.destroy_process_group()

if __name__ == "__main__":
    out = "/tmp/diag_coll_sizes.json"
    for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
        started = time.perf_counter()
        mp.spawn(rank, args=(out,), nprocs=2)
        rows = json.load(open(out))
        print(f"repeat {rep} ({time.perf_counter() - started:.1f} s)")
        for kind, found in rows.items():
            probe = [r for r in found if r["elements"] not in LARGE]
            line = figures({kind: probe}, 2, "probe sizes")[kind]
            for r in found:
                mib = r["elements"] * 4 / 2**20
                fast = predicted_seconds(line, kind, r["elements"] * 4, 2)
                print(f"  {kind:15s} {mib:8.3f} MiB  best {r['seconds']*1e3:8.2f} ms  slowest {r['slowest_seconds']*1e3:8.2f} ms"
                      f"  probe's line {fast*1e3:8.2f} ms  best/line {r['seconds']/fast:5.2f}"
                      + ("  (beyond the probe's sizes)" if r["elements"] in LARGE else ""))
