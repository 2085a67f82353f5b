"""The default run's model, micro-steps (the boundary's every eighth) through its engine from the rendered
config: two processes at once each in its own one-rank world, against one two-rank world (gloo), as the run.
Per repeat of 32 micro-steps, each process prints its milliseconds per micro-step, the part blocked in
collectives (zerogate.runtime.collective_clock, the run's own collectives(s)), the rest, and the collectives
called per micro-step. PROFILE=1: rank 0 also runs 64 micro-steps under cProfile first
(/tmp/prof_<world>.out). Arguments: the modes in order (default: one two one two)."""

import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

from zerogate.runtime.launch import remove_shm_buffers

RES = "results/cpu-tiny/vm/deepspeed/"


def worker(rank, world, port, steps, out):
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    sys.path[:0] = ["workflow", "."]
    from zerogate.runtime.collective_clock import CollectiveClock

    clock = CollectiveClock().install()
    import deepspeed

    from zerogate.contracts.run import DsConfig, RunSpec
    from zerogate.model.build import apply_training_features, build_model, planned_model_config
    from zerogate.runtime.engines import DeepSpeedEngine
    from zerogate.runtime.launch import one_rank_config

    spec, ds = RunSpec.read(RES + "run_spec.json"), DsConfig.read(RES + "ds_config.json")
    deepspeed.init_distributed(dist_backend="gloo")
    config = one_rank_config(ds.raw) if world == 1 else json.loads(json.dumps(ds.raw))
    torch.manual_seed(0)
    model_config = planned_model_config(spec.model, spec.vocab_size, spec.seq_len)
    model = build_model(model_config, config)
    apply_training_features(model, spec.training)
    engine = DeepSpeedEngine(model, config).engine
    engine.train()
    ids = torch.randint(0, model_config.vocab_size, (1, spec.seq_len))

    def micro():
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()

    for _ in range(16):
        micro()
    if os.environ.get("PROFILE") and rank == 0:
        import cProfile

        profile = cProfile.Profile()
        clock.take()
        profile.enable()
        for _ in range(64):
            micro()
        profile.disable()
        profile.dump_stats(f"/tmp/prof_{world}.out")
        print("profiled world", world, "collectives per micro-step", clock.take()[0] / 64)
    rows = []
    for _ in range(5):
        clock.take()
        started = time.perf_counter()
        for _ in range(steps):
            micro()
        seconds = (time.perf_counter() - started) / steps
        blocked, calls = clock.take()
        rows.append((seconds, blocked / steps, calls / steps))
    json.dump(rows, open(f"{out}.{rank}.{port}", "w"))


def run(mode, steps=32):
    out = f"/tmp/diag_world_model_{mode}"
    if mode == "two":
        mp.spawn(worker, args=(2, 29631, steps, out), nprocs=2)
        files = [f"{out}.{r}.29631" for r in (0, 1)]
    else:
        context = mp.get_context("spawn")
        processes = [context.Process(target=worker, args=(0, 1, 29640 + i, steps, out)) for i in (0, 1)]
        [p.start() for p in processes]
        [p.join() for p in processes]
        files = [f"{out}.0.{29640 + i}" for i in (0, 1)]
    for port in (29631, 29640, 29641):  # DeepSpeed's CPU comm op never removes its shm buffers
        remove_shm_buffers(port)
    for name in files:
        print(mode, " ".join(f"{s * 1e3:.2f}ms(comm {c * 1e3:.2f}, rest {(s - c) * 1e3:.2f}, {n:.1f} calls)"
                             for s, c, n in json.load(open(name))), flush=True)


if __name__ == "__main__":
    for mode in sys.argv[1:] or ("one", "two", "one", "two"):
        run(mode)
