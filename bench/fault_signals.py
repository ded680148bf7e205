#!/usr/bin/env python3
"""Soak (issue 30): start the issue's `phaze search` in its own process group, send SIGINT
(to the group, as Ctrl-C does) or SIGTERM (to the parent) at a random moment, time the
exit and count stderr lines and processes left.

    python3 bench/fault_signals.py N SIGINT|SIGTERM LOW_S HIGH_S [SEED]
"""
import os, random, signal, subprocess, sys, time, tempfile
n = int(sys.argv[1]); sig = getattr(signal, sys.argv[2]); lo, hi = float(sys.argv[3]), float(sys.argv[4])
random.seed(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
times, bad = [], []
for i in range(n):
    d = tempfile.mkdtemp(prefix="phaze_sig")
    cmd = [sys.executable, "-m", "phaze", "search", "--model", "bert-large", "--devices", "8",
           "--space-every", "10", "--global-batch", "64", "--no-baselines", "--workers", "2",
           "--out", f"{d}/r.csv"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         start_new_session=True, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(random.uniform(lo, hi))
    t0 = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); _, err = p.communicate()
        bad.append((i, "hang")); continue
    dt = time.monotonic() - t0
    # any survivor of the group?
    for _ in range(50):  # the resource tracker ends just after its parent
        left = subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.1)
    lines = [l for l in err.splitlines() if l.strip()]
    times.append(dt)
    if len(lines) != 1 or "Traceback" in err or left:
        bad.append((i, p.returncode, lines[-3:], left))
        open(f"/tmp/phaze_sig_bad_{sys.argv[2]}_{i}.txt", "w").write(err)
    print(f"run {i} rc={p.returncode} exit_s={dt:.2f} lines={len(lines)} left={len(left)} {lines[-1][:90] if lines else ''}", flush=True)
print(f"{sys.argv[2]}: {len(times)}/{n} exited; max exit {max(times):.2f} s, mean {sum(times)/len(times):.2f} s; bad {bad}")
