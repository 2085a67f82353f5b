# Per-thread CPU of the two training ranks over 10 s of a running default run (launched by hand beside it:
# deepspeed.launcher.launch ... zerogate.train.loop with the rendered files and another --out-dir).
import psutil, time
procs = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.info["cmdline"] and "zerogate.train.loop" in " ".join(p.info["cmdline"]) and "--local_rank" in " ".join(p.info["cmdline"])]
t0 = {p.pid: {t.id: (t.user_time + t.system_time) for t in p.threads()} for p in procs}
c0 = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
sys0 = psutil.cpu_times()
time.sleep(10)
for p in procs:
    t1 = {t.id: (t.user_time + t.system_time) for t in p.threads()}
    busy = sorted(((t1[i] - t0[p.pid].get(i, 0)) / 10, i) for i in t1)[::-1]
    print(p.pid, "process cpu %.2f cores" % ((sum(p.cpu_times()[:2]) - c0[p.pid]) / 10), "top threads:", [round(b, 3) for b, i in busy[:6]], "threads", len(t1))
sys1 = psutil.cpu_times()
print("machine idle share %.2f" % ((sys1.idle - sys0.idle) / (sum(sys1) - sum(sys0))))
