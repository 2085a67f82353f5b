"""The micro-benchmarks' synthetic stacks (4 and 24 layers of 8 x 8 without a bias, 24 with one) through an
engine from the default run's config (zerogate.predict.microbench.stack_config): two processes at once each
in its own one-rank world, against one two-rank world (gloo). Per repeat of 40 micro-steps, each process
prints its milliseconds per micro-step, the part blocked in collectives (zerogate.runtime.collective_clock,
the run's own collectives(s)), the rest, and the collectives called per micro-step."""

import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

from zerogate.runtime.launch import remove_shm_buffers

CFG = "results/cpu-tiny/vm/deepspeed/ds_config.json"


def worker(rank, world, port, modules, params, steps, out):
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    sys.path[:0] = ["workflow", "."]
    from zerogate.runtime.collective_clock import CollectiveClock

    clock = CollectiveClock().install()
    import deepspeed

    from zerogate.contracts.run import DsConfig
    from zerogate.predict.microbench import stack_config
    from zerogate.runtime.module_overhead import StackShape, engine_step, stack

    deepspeed.init_distributed(dist_backend="gloo")
    config = stack_config(DsConfig.read(CFG), world)
    model = stack(StackShape(modules, 8, 64, params))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    step = engine_step(engine, 64, 8)
    for _ in range(10):
        step()
    rows = []
    for _ in range(5):
        clock.take()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = (time.perf_counter() - started) / steps
        blocked, calls = clock.take()
        rows.append((seconds, blocked / steps, calls / steps))
    json.dump(rows, open(f"{out}.{rank}.{port}", "w"))


def run(mode, modules, params, steps=40):
    out = f"/tmp/diag_world_stacks_{mode}_{modules}_{params}"
    if mode == "two":
        mp.spawn(worker, args=(2, 29611, modules, params, steps, out), nprocs=2)
        files = [f"{out}.{r}.29611" for r in (0, 1)]
    else:
        context = mp.get_context("spawn")
        processes = [context.Process(target=worker, args=(0, 1, 29620 + i, modules, params, steps, out))
                     for i in (0, 1)]
        [p.start() for p in processes]
        [p.join() for p in processes]
        files = [f"{out}.0.{29620 + i}" for i in (0, 1)]
    for port in (29611, 29620, 29621):  # DeepSpeed's CPU comm op never removes its shm buffers
        remove_shm_buffers(port)
    for name in files:
        print(mode, modules, params, " ".join(
            f"{s * 1e3:.2f}ms(comm {c * 1e3:.2f} rest {(s - c) * 1e3:.2f}, {n:.1f} calls)"
            for s, c, n in json.load(open(name))), flush=True)


if __name__ == "__main__":
    for modules, params in [(4, 1), (24, 1), (24, 2)]:
        for mode in ("one", "two"):
            run(mode, modules, params)
