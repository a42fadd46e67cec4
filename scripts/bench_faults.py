"""The fault table (issue 15): how fast every rank of a 2-rank job ends when a peer fails, and what is left.

    python scripts/bench_faults.py                        # generator graph (20k nodes), all rows
    python scripts/bench_faults.py --dataset cora --root "$PYG_DIST_DATA/planetoid" --rows kill1,stop1
    python scripts/bench_faults.py --transports tensorpipe sockets --checkpoint-seconds 0   # every row on both

Each row starts ``examples/distributed/node_classification.py`` (through ``scripts/run_with_faults.py``,
which logs every step) under torchrun on 127.0.0.1, waits until both ranks train, injects the fault and
measures, from the injection: when each rank process ended, torchrun's exit code, each rank's last error
line (typed: ``[rank r] ErrorType: ...``; row ``typed1``: rank 1 raises a typed error, and the survivor
quotes the line rank 1 published, ``peer rank 1 failed: CheckpointError: ...``), processes left behind
(sampler workers included) and ``/dev/shm`` entries left behind (of those the job's processes were seen
holding). "two agents" rows run one torchrun per rank (``--nnodes 2``), the shape of a two-machine job:
nobody kills the survivor for it, it must notice by itself. A SIGSTOPped rank gets SIGCONT once the other rank
ended (or after the bound + 60 s): its time is when it then ended.

"junk" rows send an HTTP health check and 64 KiB of random bytes to every listener of one kind (the kinds a
rank labels in ``<log>/rank<r>_a0.listeners.json``: gloo, the RPC transport's; a worker's RPC listener; the worker
world's store; torchrun's store) into a bounded run (25 epochs of 60 steps) and watch: "trains on to the end: exit 0"
when the job survives and finishes by itself.

``--transports`` runs every row once per RPC transport (``PYG_DIST_TRANSPORT``), each labelled ``[transport]``.

A second table measures checkpoints: steps/s with and without ``--checkpoint-interval 5`` (12 times the
asked one per minute, so that a short run writes some), the measured seconds per checkpoint (hence the
overhead of one per minute) and the time from an elastic restart's kill to the first new step.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples" / "distributed"
ROWS = {  # name: (what, agents, num_workers, fault)
    "kill1": ("SIGKILL rank 1 mid-epoch", 1, 0, "kill1"),
    "kill0": ("SIGKILL rank 0 mid-epoch", 1, 0, "kill0"),
    "worker": ("SIGKILL a sampler worker of rank 1", 1, 1, "worker"),
    "stop1": ("SIGSTOP rank 1 (held past the bound)", 1, 0, "stop1"),
    "port": ("RPC port taken before start", 1, 1, "port"),
    "ctrlc": ("Ctrl-C to torchrun (its process group)", 1, 0, "ctrlc"),
    "agent": ("agent SIGKILLed", 1, 0, "agent"),
    "agentx2": ("agent SIGKILLed, the first of two agents", 2, 0, "agent"),
    "kill1x2": ("SIGKILL rank 1, two agents", 2, 0, "kill1"),
    "stop1x2": ("SIGSTOP rank 1, two agents", 2, 0, "stop1"),
    "kill0x2": ("SIGKILL rank 0, two agents", 2, 0, "kill0"),
    "killseeds": ("SIGKILL rank 1 as the loaders agree on seeds", 1, 0, "balance"),
    "stopseeds": ("SIGSTOP rank 1 as the loaders agree on seeds", 1, 0, "stop-balance"),
    "killend": ("SIGKILL rank 1 entering shutdown", 1, 0, "shutdown"),
    "stopend": ("SIGSTOP rank 1 entering shutdown", 1, 0, "stop-shutdown"),
    "typed1": ("rank 1 fails with a typed error (CheckpointError) mid-epoch", 1, 0, "raise"),
    "junk-rpc": ("junk bytes to rank 1's RPC listeners", 1, 0, "junk:1:rpc"),
    "junk-gloo": ("junk bytes to rank 1's gloo listeners", 1, 0, "junk:1:gloo"),
    "junk-store": ("junk bytes to the sampler workers' RPC store", 1, 1, "junk:s:rpc store"),
    "junk-agent": ("junk bytes to torchrun's store (MASTER_PORT)", 1, 0, "junk:a:agent"),
    "junk-worker": ("junk bytes to a sampler worker's RPC listeners", 1, 1, "junk:w:rpc"),
}
#: What a junk row sends to every listener of its kind: an HTTP health check, then 64 KiB of random bytes.
JUNK = (b"GET / HTTP/1.0\r\n\r\n", os.urandom(64 << 10))
#: Seconds a junk row watches the job after the bytes were sent (a job that survives keeps training)...
JUNK_WATCH = 20.0
#: ... and then waits, at most, for it to train on to its own end (junk rows run JUNK_RUN's steps).
JUNK_END = 240.0
JUNK_RUN = ("--epochs", "25", "--max-steps", "60")
#: Faults a rank injects into itself at a phase (scripts/run_with_faults.py); the rest are injected here.
PHASES = ("balance", "stop-balance", "shutdown", "stop-shutdown", "raise")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(args, work: Path) -> Path:
    import pyg_dist
    from pyg_dist.partition import Partitioner
    if args.dataset == "cora":
        data = pyg_dist.load_dataset("cora", root=args.root)
    else:
        data = pyg_dist.synthetic_graph(args.num_nodes, 10, num_features=32, num_classes=8, seed=0)
    folder = work / f"{args.dataset}-2"
    Partitioner(data, 2, method="metis").save(folder, progress=False)
    return folder


def launch(folder: Path, log: Path, agents: int, workers: int, rpc_port: int, extra=(), kill=("-1", "0"),
           transport: str = ""):
    """The job's torchrun agents (each in its own session, like a terminal's foreground group)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYG_DIST_RPC_PORT=str(rpc_port))
    if transport:
        env["PYG_DIST_TRANSPORT"] = transport
    job = [str(HERE / "run_with_faults.py"), "node_classification", *kill, str(log), "--",
           "--partition-dir", str(folder), "--epochs", "1000", "--batch-size", "64", "--num-neighbors", "5,3",
           "--quiet", "--num-workers", str(workers), *extra]
    port, procs = free_port(), []
    for node in range(agents):
        shape = (["--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
                 if agents == 1 else ["--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
                                      "--master-addr=127.0.0.1", f"--master-port={port}"])
        out = open(log.parent / f"{log.name}.agent{node}.txt", "w")
        procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--monitor-interval=0.1",
                                       *shape, *job], stdout=out, stderr=subprocess.STDOUT, env=env,
                                      cwd=EXAMPLES, start_new_session=True))
    return procs


def wait_training(log: Path, procs, steps: int = 3, limit: float = 120.0) -> dict:
    """``{rank: pid}`` once both ranks logged ``steps`` steps."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        files = [log / f"rank{r}_a0.txt" for r in (0, 1)]
        if all(f.exists() and len(f.read_text().splitlines()) >= steps for f in files):
            return {r: int((log / f"rank{r}_a0.pid").read_text()) for r in (0, 1)}
        if any(p.poll() is not None for p in procs):
            agents = sorted(log.parent.glob(f"{log.name}.agent*"))
            tails = "\n".join(f.read_text(errors="replace")[-2000:] for f in agents)
            raise RuntimeError(f"the job ended before training:\n{tails}")
        time.sleep(0.1)
    raise RuntimeError(f"no training within {limit} s: see {log}.agent*.txt")


def inject(fault: str, pids: dict, procs) -> int:
    """Injects the fault; returns the pid that was hit (or the agent's)."""
    import psutil
    if fault in ("kill0", "kill1"):
        pid = pids[int(fault[-1])]
        os.kill(pid, signal.SIGKILL)
    elif fault == "stop1":
        pid = pids[1]
        os.kill(pid, signal.SIGSTOP)
    elif fault == "worker":
        pid = psutil.Process(pids[1]).children()[0].pid
        os.kill(pid, signal.SIGKILL)
    elif fault == "agent":  # its ranks must not train on as orphans (pyg_dist.train.orphan)
        pid = procs[0].pid
        os.kill(pid, signal.SIGKILL)
    else:  # ctrlc: SIGINT to the whole foreground group, as a terminal does
        pid = procs[0].pid
        os.killpg(os.getpgid(pid), signal.SIGINT)
    return pid


def watch(pids: dict, procs, t0: float, limit: float, until: str = "") -> dict:
    """Seconds from ``t0`` until each rank process, each agent and the whole job ended (``None``: still alive
    at ``limit``, or when ``until`` ended)."""
    import psutil
    ended = {f"rank {r}": None for r in pids}
    ended.update({f"agent {i}": None for i in range(len(procs))})
    ended["job"] = None
    while time.monotonic() - t0 < limit and None in ended.values() and not (until and ended[until] is not None):
        now = time.monotonic() - t0
        for r, pid in pids.items():
            if ended[f"rank {r}"] is None and _gone(psutil, pid):
                ended[f"rank {r}"] = now
        for i, p in enumerate(procs):
            if ended[f"agent {i}"] is None and p.poll() is not None:
                ended[f"agent {i}"] = now
        if ended["job"] is None and all(p.poll() is not None for p in procs):
            ended["job"] = now
        time.sleep(0.05)
    return ended


def _gone(psutil, pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def leftovers(marker: str, shm_before: set, job_shm: set | None = None) -> tuple:
    """Processes whose command line names ``marker`` (killed after counting), the names of new ``/dev/shm``
    entries the job left (among ``job_shm``, the names it was seen holding, when given)."""
    import psutil
    left = []
    for p in psutil.process_iter(["cmdline"]):
        if p.info["cmdline"] and any(marker in c for c in p.info["cmdline"]) and p.pid != os.getpid():
            left.append(p)
    for p in left:
        try:
            p.send_signal(signal.SIGCONT)
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return len(left), sorted(_left_in_shm(shm_before, job=job_shm))


def _shm_names() -> set:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _held_in_shm(pids=None) -> set:
    """``/dev/shm`` names the processes ``pids`` (default: every live one) map or hold open."""
    held = set()
    for pid in (pids if pids is not None else [p.name for p in Path("/proc").iterdir() if p.name.isdigit()]):
        proc = Path("/proc", str(pid))
        try:
            held.update(line.split("/dev/shm/", 1)[1].split()[0] for line in
                        (proc / "maps").read_text().splitlines() if "/dev/shm/" in line)
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    held.add(target[len("/dev/shm/"):].split()[0])
        except OSError:  # the process ended while read, or is not ours to read
            continue
    return held


class JobShm:
    """The ``/dev/shm`` names the job's processes (the launchers and every descendant) map or hold open, polled
    every ``every`` seconds in a thread while the row runs: what the job itself could leave behind.

    Another process on the machine (the other test process) makes and drops entries of its own meanwhile
    (spawned workers' ``sem.mp-*``, released by their resource tracker some seconds after their holder exits);
    only names the job was seen holding count as its leftovers.
    """

    def __init__(self, procs, every: float = 0.25):
        import threading
        self.procs, self.every, self.seen = procs, every, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _pids(self) -> list:
        import psutil
        pids = []
        for p in self.procs:
            try:
                pids += [p.pid] + [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return pids

    def _poll(self) -> None:
        while not self._stop.wait(self.every):
            self.seen |= _held_in_shm(self._pids())

    def stop(self) -> set:
        self._stop.set()
        self._thread.join()
        return self.seen


def _left_in_shm(before: set, settle: float = 2.0, job: set | None = None) -> set:
    """Entries made since ``before`` (and, given ``job``, among the names the job was seen holding) that outlast
    ``settle`` seconds and no live process holds.

    The job's processes are gone when this runs, so an entry still held belongs to whoever else runs on the
    machine (the other test process); an entry made and unlinked by them in passing does not outlast the settle.
    """
    new = _shm_names() - before
    if job is not None:
        new &= job
    if new:
        time.sleep(settle)
        new &= _shm_names()
    return new - _held_in_shm()


def error_lines(log: Path, agents: int) -> dict:
    lines = {}
    for node in range(agents):
        for line in (log.parent / f"{log.name}.agent{node}.txt").read_text(errors="replace").splitlines():
            for r in (0, 1):
                if line.startswith(f"[rank {r}] "):
                    lines[r] = line[len(f"[rank {r}] "):][:400]  # room for a survivor's quote of its peer
    return lines


def run_row(name: str, folder: Path, work: Path, bound: float, transport: str = "") -> dict:
    what, agents, workers, fault = ROWS[name]
    if fault.endswith(":rpc"):
        fault = fault[:-3] + (transport or _default_transport())
    log = work / f"log_{name}{'_' + transport if transport else ''}"
    shm_before = _shm_names()
    rpc_port, blocker = free_port(), None
    if fault == "port":
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", rpc_port))
        blocker.listen()
    short = ("--epochs", "1", "--max-steps", "5") if "shutdown" in fault else JUNK_RUN if "junk" in fault else ()
    procs = launch(folder, log, agents, workers, rpc_port, extra=short,
                   kill=("1", fault) if fault in PHASES else ("-1", "0"), transport=transport)
    job_shm = JobShm(procs)
    try:
        ended, result = _fault(fault, log, procs, bound, rpc_port)
    except BaseException:
        for p in procs:  # torchrun's ranks outlive a SIGKILLed torchrun: kill them by their log path too
            if p.poll() is None:
                os.killpg(os.getpgid(p.pid), signal.SIGKILL)
        leftovers(str(log), shm_before, job_shm.stop())
        raise
    finally:
        if blocker is not None:
            blocker.close()
        for p in procs:
            if p.poll() is None:
                os.killpg(os.getpgid(p.pid), signal.SIGKILL)
    orphans, shm = leftovers(str(log), shm_before, job_shm.stop())
    return {"row": what + (f" [{transport}]" if transport else ""), "ended": ended,
            "rc": [p.returncode for p in procs], "lines": error_lines(log, agents),
            "orphans": orphans, "shm": len(shm), "shm_names": shm[:8], "result": result, "fault": fault}


def _default_transport() -> str:
    from pyg_dist.rpc.settings import transport_name
    return transport_name()


def send_junk(log: Path, pids: dict, fault: str, rpc_port: int) -> int:
    """Sends :data:`JUNK` to every listener of the kind named in ``fault`` (``junk:<rank|w>:<kind>``); returns
    the pid whose listeners were hit. ``w``: rank 1's first sampler worker (its listeners, found by psutil)."""
    import json

    import psutil

    from pyg_dist.iface import listeners
    _, who, kind = fault.split(":", 2)
    if who == "w":
        pid = psutil.Process(pids[1]).children()[0].pid
        targets = [tuple(t) for t in listeners(pid)]  # a worker opens only its RPC listener (and its world's store)
    elif who == "s":  # the worker world's store: on rpc_port + k, in some process of rank 0's tree
        tree = [pids[0]] + [c.pid for c in psutil.Process(pids[0]).children(recursive=True)]
        pid, targets = pids[0], [t for p in tree for t in listeners(p) if rpc_port <= t[1] < rpc_port + 8]
    elif who == "a":
        pid = psutil.Process(pids[0]).parent().pid  # torchrun's agent hosts the job's store
        targets = [tuple(t) for t in listeners(pid)]
    else:
        pid = pids[int(who)]
        path = log / f"rank{who}_a0.listeners.json"
        targets = [tuple(t) for t in json.loads(path.read_text()).get(kind, [])]
    if not targets:
        raise RuntimeError(f"{fault}: no {kind} listener found for pid {pid}")
    for payload in JUNK:
        for addr, port in targets:
            try:
                with socket.create_connection((addr, port), timeout=2) as s:
                    s.sendall(payload)
            except OSError:
                pass  # a listener that died from the previous payload
    return pid


def _junk(fault: str, log: Path, procs, bound: float, rpc_port: int):
    """Sends the junk, then lets the job run: a job that survives trains on to its own end (the row's run is
    bounded: ``JUNK_RUN``), and the row reports its exit code; one that dies is timed like any fault."""
    pids = wait_training(log, procs)
    before = {r: len((log / f"rank{r}_a0.txt").read_text().splitlines()) for r in (0, 1)}
    t0 = time.monotonic()
    send_junk(log, pids, fault, rpc_port)
    ended = watch(pids, procs, t0, JUNK_WATCH)
    if ended["job"] is None:  # alive: let it train to its end; ending (a rank gone, its own end or not): time it
        alive = all(ended[f"rank {r}"] is None for r in (0, 1))
        limit = JUNK_WATCH + JUNK_END if alive else bound + 60
        ended.update({k: v for k, v in watch(pids, procs, t0, limit).items() if ended[k] is None})
    rcs = [p.poll() for p in procs]
    grew = {r: len((log / f"rank{r}_a0.txt").read_text().splitlines()) - before[r] for r in (0, 1)}
    if rcs and all(rc == 0 for rc in rcs):
        return {}, f"trains on to the end: exit 0 ({grew[0]} / {grew[1]} steps after the junk)"
    if ended["job"] is None and all(ended[f"rank {r}"] is None for r in (0, 1)):
        return {}, f"still training {JUNK_WATCH + JUNK_END:g} s after the junk ({grew[0]} / {grew[1]} steps)"
    return ended, ""


def _fault(fault: str, log: Path, procs, bound: float, rpc_port: int):
    """Injects ``fault`` (or waits for the rank that injects it itself); returns ``(ended, result)``."""
    if fault.startswith("junk:"):
        return _junk(fault, log, procs, bound, rpc_port)
    t0 = time.monotonic()
    if fault in PHASES:
        pids = {r: _pid(log, r, procs) for r in (0, 1)}
        t0 = _hit(pids[1], stopped=fault.startswith("stop-"), procs=procs)
        hit = pids[1]
    else:
        pids = wait_training(log, procs)
        if fault == "port":  # handled: the worker world moves to a port the ranks agree on
            result = f"trains (first steps {time.monotonic() - t0:.1f} s after launch)"
            for p in procs:
                os.killpg(os.getpgid(p.pid), signal.SIGINT)
            watch(pids, procs, time.monotonic(), bound + 30)
            return {}, result
        t0 = time.monotonic()
        hit = inject(fault, pids, procs)
    stopped = fault in ("stop1", "stop-balance", "stop-shutdown")
    ended = watch(pids, procs, t0, bound + 60, until="rank 0" if stopped else "")
    if stopped:  # the hung rank comes back once the other ended: it must end by itself too
        try:
            os.kill(hit, signal.SIGCONT)
        except ProcessLookupError:
            pass
        ended.update({k: v for k, v in watch(pids, procs, t0, bound + 90).items() if ended[k] is None})
    return ended, ""


def _pid(log: Path, rank: int, procs, limit: float = 120.0) -> int:
    path, deadline = log / f"rank{rank}_a0.pid", time.monotonic() + limit
    while not path.exists() or not path.read_text():
        if time.monotonic() > deadline or all(p.poll() is not None for p in procs):
            raise RuntimeError(f"rank {rank} did not start: see {log}.agent*.txt")
        time.sleep(0.05)
    return int(path.read_text())


def _hit(pid: int, stopped: bool, procs, limit: float = 180.0) -> float:
    """When the rank that faults itself is dead (or stopped)."""
    import psutil
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            status = psutil.Process(pid).status()
        except psutil.NoSuchProcess:
            return time.monotonic()
        if status == (psutil.STATUS_STOPPED if stopped else psutil.STATUS_ZOMBIE):
            return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"pid {pid} never reached its fault")


def fmt(seconds) -> str:
    return "alive" if seconds is None else f"{seconds:.1f}"


def print_fault_table(rows, bound: float) -> None:
    print(f"\nfailure bound {bound:g} s (PYG_DIST_FAILURE_TIMEOUT); seconds from the fault until each process ended")
    print("| fault | rank 0 ended | rank 1 ended | job ended | torchrun rc | orphans | /dev/shm left | "
          "rank 0 says | rank 1 says |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e, says = r["ended"], r["lines"]
        if r["result"]:
            print(f"| {r['row']} | {r['result']} | | | {r['rc']} | {r['orphans']} | {r['shm']} | | |")
            continue
        print(f"| {r['row']} | {fmt(e['rank 0'])} | {fmt(e['rank 1'])} | {fmt(e['job'])} | {r['rc']} | "
              f"{r['orphans']} | {r['shm']} | {says.get(0, '-')} | {says.get(1, '-')} |")


def step_rate(log: Path, rank: int = 0, attempt: int = 0, skip: int = 5) -> float:
    times = [float(line.split(" ")[2]) for line in (log / f"rank{rank}_a{attempt}.txt").read_text().splitlines()]
    times = times[skip:]
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else float("nan")


def timed_job(folder: Path, work: Path, name: str, seconds: float, extra=()):
    """Runs the job for ``seconds`` of training; returns its log folder."""
    log = work / f"log_{name}"
    procs = launch(folder, log, 1, 0, free_port(), extra=extra)
    try:
        wait_training(log, procs)
        time.sleep(seconds)
    finally:
        for p in procs:
            os.killpg(os.getpgid(p.pid), signal.SIGINT)
            p.wait(timeout=60)
    return log


#: Seconds between checkpoints in the steps/s comparison: 12 times more often than one per minute, so that
#: a 20 s run writes some.
INTERVAL = 5


def checkpoint_table(folder: Path, work: Path, seconds: float, repeats: int) -> None:
    plain, with_ck = [], []
    for i in range(repeats):  # interleaved: this machine's speed drifts between runs
        plain.append(step_rate(timed_job(folder, work, f"ck_none{i}", seconds)))
        with_ck.append(step_rate(timed_job(folder, work, f"ck_minute{i}", seconds, extra=(
            "--checkpoint-dir", str(work / f"ck_minute{i}"), "--checkpoint-interval", str(INTERVAL)))))
    plain_s, with_s = sorted(plain)[repeats // 2], sorted(with_ck)[repeats // 2]
    every = work / "ck_every"
    log = timed_job(folder, work, "ck_every", 10, extra=("--checkpoint-dir", str(every), "--checkpoint-every", "20"))
    sizes = [p.stat().st_size for p in every.glob("step_*/rank_0.pt")]
    saves = [float(line.split(" ")[3]) for line in (log / "rank0_a0.txt").read_text().splitlines()]
    saves = [s for s in saves if s > 0]
    save_s = sum(saves) / max(len(saves), 1)
    print(f"\ncheckpoints ({seconds:g} s of training per run, rank 0, median of {repeats} interleaved runs)")
    print("| what | value |")
    print("|---|---|")
    print(f"| steps/s, no checkpoints | {plain_s:.1f} ({' '.join(f'{v:.1f}' for v in plain)}) |")
    runs = " ".join(f"{v:.1f}" for v in with_ck)
    print(f"| steps/s, --checkpoint-interval {INTERVAL} (12x the asked rate) | {with_s:.1f} ({runs}); "
          f"{100 * (plain_s - with_s) / plain_s:+.1f} % |")
    print(f"| seconds per checkpoint (write + 2 barriers; mean of {len(saves)}), rank file size | {save_s:.3f} s, "
          f"{(sizes[0] if sizes else 0) / 1e6:.2f} MB |")
    print(f"| overhead at one checkpoint per minute: save / 60 s | {100 * save_s / 60:.2f} % |")
    per_epoch = sum(1 for line in (work / "log_ck_none0" / "rank0_a0.txt").read_text().splitlines()
                    if line.startswith("1 "))
    print(f"| resume: elastic restart, kill to first new step | {elastic_resume(folder, work, per_epoch):.1f} s |")


def elastic_resume(folder: Path, work: Path, per_epoch: int) -> float:
    """Seconds from the kill of rank 1 (after step 40) to the first step of the restarted group."""
    epochs = str(-(-60 // max(per_epoch, 1)))  # 60 steps: checkpoints at 20 and 40, the kill at 40
    log, ck = work / "log_elastic", work / "ck_elastic"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYG_DIST_RPC_PORT=str(free_port()))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--monitor-interval=0.1", "--nnodes=1",
           "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
           "--max-restarts=1", str(HERE / "run_with_faults.py"), "node_classification", "1", "40", str(log), "--",
           "--partition-dir", str(folder), "--epochs", epochs, "--batch-size", "64", "--num-neighbors", "5,3",
           "--quiet", "--checkpoint-dir", str(ck), "--checkpoint-every", "20"]
    subprocess.run(cmd, env=env, cwd=EXAMPLES, capture_output=True, timeout=600, check=True)
    killed = float((log / "rank1_a0.txt").read_text().splitlines()[-1].split(" ")[2])  # logged, then killed
    first = float((log / "rank0_a1.txt").read_text().splitlines()[0].split(" ")[2])
    return first - killed


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=["synthetic", "cora"], default="synthetic")
    p.add_argument("--root", default=None, help="Planetoid raw files (cora)")
    p.add_argument("--num-nodes", type=int, default=20_000)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated: {','.join(ROWS)}")
    p.add_argument("--checkpoint-seconds", type=float, default=20.0, help="training seconds per checkpoint run "
                   "(0: no checkpoint table)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs per checkpoint setting")
    p.add_argument("--transports", nargs="+", choices=["sockets", "tensorpipe"], default=None,
                   help="run every fault row once per RPC transport (default: the default transport, unlabelled)")
    args = p.parse_args(argv)
    from pyg_dist.timeouts import failure_timeout
    bound = failure_timeout()
    with tempfile.TemporaryDirectory(prefix="bench_faults_") as tmp:
        work = Path(tmp)
        folder = prepare(args, work)
        rows = [run_row(name, folder, work, bound, t) for name in args.rows.split(",") if name
                for t in args.transports or [""]]
        print_fault_table(rows, bound)
        if args.checkpoint_seconds > 0:
            checkpoint_table(folder, work, args.checkpoint_seconds, args.repeats)


if __name__ == "__main__":
    main()
