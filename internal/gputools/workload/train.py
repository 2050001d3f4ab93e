#!/usr/bin/env python3
"""gpuchaos reference training workload: data-parallel training of a small
MLP on synthetic data, with crash-safe checkpoints and Prometheus metrics.

One process per rank, started by `gpuchaos workload run` or by torchrun:

    gpuchaos workload script > train.py
    torchrun --standalone --nproc-per-node 2 train.py --backend gloo \\
        --ckpt-dir /tmp/ckpt --ckpt-every 20 --steps 400

The rendezvous comes from the environment torchrun and the gpuchaos
supervisor both set: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
The backend is gloo on CPU or nccl with one GPU per rank (cuda:LOCAL_RANK);
'auto' picks nccl when CUDA is there.

Determinism: the batch of step s on rank r is drawn from a generator seeded
with (seed, s, r), and the targets come from a fixed random "teacher"
network, so a run resumed from a checkpoint recomputes exactly the steps an
uninterrupted run would have, and ends with the same parameters (the final
'done' line carries their SHA-256).

Checkpoints (only rank 0 writes: after every step the DDP replicas are
identical, so one copy is the whole state; every rank reads it on resume,
so the directory must be shared by the ranks, as it is on one node):

    ckpt-<step>.pt    torch.save({"format", "step", "model", "optim",
                      "config", "world_size"}), written to ckpt-<step>.pt.tmp,
                      fsynced, renamed, and the directory fsynced;
    ckpt-<step>.json  the manifest, written and renamed the same way AFTER
                      the data file: {"format": "gpuchaos-ckpt/1", "step",
                      "file", "size", "sha256", "time", "world_size", "mode"}.

A checkpoint is valid only when its manifest exists, names it, and the data
file's size and SHA-256 match. On start rank 0 removes leftover *.tmp files,
then takes the newest valid checkpoint, logging every file it rejects and
why. The last --keep checkpoints are kept.

--ckpt-mode sync writes on the training thread (the step stalls for the
write); async copies the state on the training thread and writes it in a
background thread, one write in flight at a time (a checkpoint due while
the previous is still being written waits for it). A failed write (ENOSPC,
EIO...) removes its temporary file and is counted; --on-save-error
continue trains on, exit ends the rank with status 3 so a supervisor
restarts the job.

Every rank serves the Prometheus text format on
http://127.0.0.1:<--metrics-port + rank>/metrics (0 turns it off) and prints
one JSON object per line on stdout: every --log-every steps and at each
checkpoint, resume and failure.

Only the standard library and torch (1.13 or newer) are used.
"""

import argparse
import copy
import datetime
import hashlib
import http.server
import io
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import zipfile
from collections import deque

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

FORMAT = "gpuchaos-ckpt/1"
NAME_RE = re.compile(r"^ckpt-(0|[1-9][0-9]*)\.pt$")
EXIT_SAVE_FAILED = 3
EXIT_BAD_CHECKPOINT = 4
CHUNK = 1 << 20


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    ap.add_argument("--hidden", type=int, default=256, help="width of every layer")
    ap.add_argument("--layers", type=int, default=4, help="Linear layers in the MLP")
    ap.add_argument("--batch", type=int, default=64, help="rows per rank per step")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0,
                    help="train until this global step (resumed runs continue to it); 0: no limit")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop after this long (all ranks stop at the same step); 0: no limit")
    ap.add_argument("--step-sleep", type=float, default=0,
                    help="seconds added to every step, to stretch it")
    ap.add_argument("--ckpt-dir", default="", help="checkpoint directory; empty: no checkpoints")
    ap.add_argument("--ckpt-every", type=int, default=20, help="checkpoint every N steps")
    ap.add_argument("--ckpt-mode", choices=["sync", "async"], default="sync")
    ap.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    ap.add_argument("--on-save-error", choices=["continue", "exit"], default="continue")
    ap.add_argument("--metrics-port", type=int, default=0,
                    help="rank r serves /metrics on 127.0.0.1:(port+r); 0: off")
    ap.add_argument("--log-every", type=int, default=10, help="print a step line every N steps")
    ap.add_argument("--job", default=os.environ.get("GPUCHAOS_JOB", "train"),
                    help="job label of the metrics (default $GPUCHAOS_JOB or 'train')")
    a = ap.parse_args(argv)
    if a.steps == 0 and a.max_seconds == 0:
        ap.error("one of --steps or --max-seconds is required")
    if a.ckpt_every < 1 or a.keep < 1 or a.log_every < 1:
        ap.error("--ckpt-every, --keep and --log-every must be at least 1")
    return a


class Log:
    """One JSON object per line on stdout, flushed so a supervisor sees it
    at once."""

    def __init__(self, rank):
        self.rank = rank
        self.lock = threading.Lock()

    def __call__(self, event, **kw):
        rec = {"time": round(time.time(), 6), "event": event, "rank": self.rank}
        rec.update(kw)
        line = json.dumps(rec, sort_keys=False)
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class Metrics:
    """The job's state as Prometheus series, with the twin's names and
    labels: job series carry {job}, the rank series {job,rank,Hostname[,gpu]}."""

    def __init__(self, job, rank, gpu):
        self.lock = threading.Lock()
        self.job, self.rank, self.gpu = job, rank, gpu
        self.host = socket.gethostname()
        self.step = 0
        self.up = 0
        self.rate = 0.0
        self.step_seconds = 0.0
        self.ckpt_step = 0
        self.ckpt_time = 0.0
        self.ckpt_seconds = 0.0
        self.ckpt_failures = 0
        self.ckpts = 0
        self.resumed = 0
        self.ckpt_interval = 0
        # Until the process knows the step it resumes from, its progress
        # series are left off the page: a step of 0 there would read as
        # every step lost, and as a burst of steps once it resumes.
        self.known = False
        self.window = deque()

    def observe_step(self, step, seconds, now):
        with self.lock:
            self.step = step
            self.step_seconds = seconds
            self.window.append((now, step))
            # Rate over the last five seconds (at least two points), so a
            # stall shows within one scrape.
            while len(self.window) > 2 and now - self.window[0][0] > 5:
                self.window.popleft()
            t0, s0 = self.window[0]
            self.rate = (step - s0) / (now - t0) if now > t0 else 0.0

    def rate_now(self, now):
        """Steps per second over the five seconds before now. Computed at
        each scrape, not only at each step, so that a job that stops
        stepping (a hung rank, a stalled collective) reads as slowing
        to 0 instead of keeping the rate of its last step forever."""
        pts = [p for p in self.window if now - p[0] <= 5]
        if not pts:
            return 0.0
        t0, s0 = pts[0]
        return (self.step - s0) / (now - t0) if now > t0 else self.rate

    def set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)

    def render(self):
        def esc(v):
            return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        job = '{job="%s"}' % esc(self.job)
        rank = '{Hostname="%s",%sjob="%s",rank="%d"}' % (
            esc(self.host), ('gpu="%d",' % self.gpu) if self.gpu is not None else "", esc(self.job), self.rank)
        with self.lock:
            rows = [
                ("gpuchaos_job_step_total", "counter", "Training steps completed.", job, self.step),
                ("gpuchaos_job_steps_per_second", "gauge", "Training steps per second over the last 5 s.", job,
                 self.rate_now(time.monotonic())),
                ("gpuchaos_job_up", "gauge", "1 while the rank is training, 0 while it starts, resumes or has finished.", job, self.up),
                ("gpuchaos_job_last_checkpoint_step", "gauge", "Step of the newest complete checkpoint.", job, self.ckpt_step),
                ("gpuchaos_job_last_checkpoint_timestamp_seconds", "gauge", "Unix time the newest checkpoint was completed.", job, self.ckpt_time),
                ("gpuchaos_job_last_checkpoint_duration_seconds", "gauge", "Seconds the newest checkpoint took to write.", job, self.ckpt_seconds),
                ("gpuchaos_job_checkpoints_total", "counter", "Checkpoints written by this process.", job, self.ckpts),
                ("gpuchaos_job_checkpoint_failures_total", "counter", "Checkpoint writes that failed in this process.", job, self.ckpt_failures),
                ("gpuchaos_job_resumed_from_step", "gauge", "Step of the checkpoint this process resumed from; 0 for a fresh start.", job, self.resumed),
                ("gpuchaos_job_checkpoint_interval_steps", "gauge", "Steps between checkpoints; 0 without checkpoints.", job, self.ckpt_interval),
                ("gpuchaos_rank_step_seconds", "gauge", "Wall time of the rank's last step.", rank, self.step_seconds),
            ]
        if not self.known:
            rows = [r for r in rows if r[0] in ("gpuchaos_job_up", "gpuchaos_job_checkpoint_interval_steps")]
        if self.rank != 0:
            # Only rank 0 writes checkpoints; the others would export a
            # frozen copy of these series.
            rows = [r for r in rows if "checkpoint" not in r[0]]
        out = []
        for name, typ, help_, labels, value in rows:
            out.append("# HELP %s %s\n# TYPE %s %s\n%s%s %s\n" % (name, help_, name, typ, name, labels, repr(float(value))))
        return "".join(out).encode()


def serve_metrics(metrics, port, log):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    try:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as e:
        # Metrics are for watching the job; a taken port must not stop it.
        log("metrics_error", port=port, error=str(e))
        return None
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="metrics", daemon=True).start()
    log("metrics", addr="127.0.0.1:%d" % port)
    return srv


# ---------------------------------------------------------------- checkpoints

def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(directory, name, data):
    """Writes data to name.tmp, fsyncs it, renames it to name and fsyncs the
    directory. The temporary file is removed when anything fails."""
    final = os.path.join(directory, name)
    tmp = final + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            # Chunked, as a large checkpoint is written, so a writer killed
            # mid-way leaves a torn temporary file, never a torn final one.
            for off in range(0, len(view), CHUNK):
                chunk = view[off:off + CHUNK]
                while chunk:
                    n = os.write(fd, chunk)
                    chunk = chunk[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        fsync_dir(directory)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def ckpt_name(step):
    return "ckpt-%d.pt" % step


def manifest_name(step):
    return "ckpt-%d.json" % step


def save_checkpoint(directory, step, state, mode, world):
    """Serialises state and writes the data file, then the manifest. Returns
    (bytes, seconds). On failure nothing of this step is left behind."""
    t0 = time.monotonic()
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    digest = hashlib.sha256(data).hexdigest()
    write_atomic(directory, ckpt_name(step), data)
    manifest = {
        "format": FORMAT, "step": step, "file": ckpt_name(step), "size": len(data),
        "sha256": digest, "time": time.time(), "world_size": world, "mode": mode,
    }
    try:
        write_atomic(directory, manifest_name(step), (json.dumps(manifest, indent=1) + "\n").encode())
    except BaseException:
        # A data file without its manifest is never loaded; free its space.
        try:
            os.unlink(os.path.join(directory, ckpt_name(step)))
        except OSError:
            pass
        raise
    return len(data), time.monotonic() - t0


def verify(directory, step):
    """Returns the manifest of checkpoint step, or raises ValueError saying
    why it is not usable."""
    path = os.path.join(directory, ckpt_name(step))
    mpath = os.path.join(directory, manifest_name(step))
    try:
        with open(mpath, "rb") as f:
            m = json.loads(f.read())
    except FileNotFoundError:
        raise ValueError("no manifest %s: the write did not complete" % manifest_name(step))
    except (OSError, ValueError) as e:
        raise ValueError("manifest %s unreadable: %s" % (manifest_name(step), e))
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ValueError("manifest %s: format is not %s" % (manifest_name(step), FORMAT))
    if m.get("step") != step or m.get("file") != ckpt_name(step):
        raise ValueError("manifest %s names step %r file %r" % (manifest_name(step), m.get("step"), m.get("file")))
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            size += len(b)
            h.update(b)
    if size != m.get("size"):
        raise ValueError("size %d, manifest says %r (torn or truncated)" % (size, m.get("size")))
    if h.hexdigest() != m.get("sha256"):
        raise ValueError("sha256 %s, manifest says %s (corrupted)" % (h.hexdigest(), m.get("sha256")))
    try:
        with zipfile.ZipFile(path) as z:
            if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist()):
                raise ValueError("zip archive without data.pkl: not written by torch.save")
    except zipfile.BadZipFile as e:
        raise ValueError("not a torch.save zip archive: %s" % e)
    return m


def list_steps(directory):
    steps = []
    for name in os.listdir(directory):
        mt = NAME_RE.match(name)
        if mt:
            steps.append(int(mt.group(1)))
    return sorted(steps, reverse=True)


def remove_leftovers(directory, log):
    for name in sorted(os.listdir(directory)):
        if name.startswith("ckpt-") and name.endswith(".tmp"):
            log("checkpoint_rejected", file=name, reason="unfinished write (temporary file); removed")
            try:
                os.unlink(os.path.join(directory, name))
            except OSError as e:
                log("cleanup_error", file=name, error=str(e))


def choose_checkpoint(directory, log):
    """The newest step whose checkpoint verifies, or 0."""
    for step in list_steps(directory):
        try:
            verify(directory, step)
        except (OSError, ValueError) as e:
            log("checkpoint_rejected", file=ckpt_name(step), step=step, reason=str(e))
            continue
        return step
    return 0


def prune(directory, saved, keep, log):
    """After step saved was written: keeps the newest keep checkpoints that
    have a manifest and removes every other checkpoint file older than
    saved (older complete ones, and data files whose write never
    completed, which no resume would take while a newer valid one exists)."""
    complete = [s for s in list_steps(directory) if os.path.exists(os.path.join(directory, manifest_name(s)))]
    kept = set(complete[:keep])
    for step in list_steps(directory):
        if step >= saved or step in kept:
            continue
        # Manifest first: a pair half removed is then rejected as having no
        # manifest instead of naming a missing file.
        for name in (manifest_name(step), ckpt_name(step)):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
            except OSError as e:
                log("cleanup_error", file=name, error=str(e))


def to_cpu(obj):
    """A deep copy of obj with every tensor copied to host memory: the
    snapshot an asynchronous checkpoint writes while training goes on."""
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


class Checkpointer:
    def __init__(self, args, rank, world, metrics, log):
        self.args, self.rank, self.world = args, rank, world
        self.metrics, self.log = metrics, log
        self.thread = None
        self.failed = None  # (step, error) of a failed background write

    def save(self, step, model, opt):
        if self.rank != 0:
            return
        self.wait()
        state = {
            "format": FORMAT, "step": step, "world_size": self.world,
            "config": config_of(self.args),
            "model": to_cpu(model.state_dict()), "optim": to_cpu(opt.state_dict()),
        }
        if self.args.ckpt_mode == "sync":
            self._write(step, state)
            self.check()
            return
        self.thread = threading.Thread(target=self._write, args=(step, state), name="ckpt-%d" % step)
        self.thread.start()

    def _write(self, step, state):
        try:
            size, secs = save_checkpoint(self.args.ckpt_dir, step, state, self.args.ckpt_mode, self.world)
        except Exception as e:
            self.metrics.set(ckpt_failures=self.metrics.ckpt_failures + 1)
            self.log("checkpoint_failed", step=step, error="%s: %s" % (type(e).__name__, e), policy=self.args.on_save_error)
            self.failed = (step, e)
            return
        now = time.time()
        self.metrics.set(ckpt_step=step, ckpt_time=now, ckpt_seconds=secs, ckpts=self.metrics.ckpts + 1)
        self.log("checkpoint_saved", step=step, bytes=size, seconds=round(secs, 6), mode=self.args.ckpt_mode)
        prune(self.args.ckpt_dir, step, self.args.keep, self.log)

    def wait(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        self.check()

    def check(self):
        """Applies --on-save-error to a failure seen since the last call."""
        if self.failed is None:
            return
        self.failed = None
        if self.args.on_save_error == "exit":
            raise SystemExit(EXIT_SAVE_FAILED)


def config_of(args):
    return {"hidden": args.hidden, "layers": args.layers}


# ---------------------------------------------------------------- training

def build_model(args, dev):
    torch.manual_seed(args.seed)
    blocks = []
    for i in range(args.layers):
        blocks.append(torch.nn.Linear(args.hidden, args.hidden))
        if i < args.layers - 1:
            blocks.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*blocks).to(dev)
    g = torch.Generator().manual_seed(args.seed + 7919)
    teacher = (torch.randn(args.hidden, args.hidden, generator=g) / args.hidden ** 0.5).to(dev)
    return model, teacher


def batch(args, step, rank, teacher, dev):
    g = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * 4099 + rank)
    x = torch.randn(args.batch, args.hidden, generator=g).to(dev)
    return x, torch.tanh(x @ teacher)


def params_digest(model):
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv=None):
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    log = Log(rank)

    # SIGTERM (the supervisor stopping the group) unwinds the stack, so a
    # write in progress removes its temporary file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        gpu = local_rank
    else:
        dev = torch.device("cpu")
        gpu = None
        # One thread per rank: ranks share the cores, and a fixed thread
        # count keeps CPU results bit-for-bit repeatable.
        torch.set_num_threads(1)

    metrics = Metrics(args.job, rank, gpu)
    # The workload checks bound lost work by the interval; exported, it
    # needs no history of checkpoints to be known.
    metrics.ckpt_interval = args.ckpt_every if args.ckpt_dir else 0
    srv = serve_metrics(metrics, args.metrics_port + rank, log) if args.metrics_port else None

    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=120))
    model, teacher = build_model(args, dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    start = 0
    if args.ckpt_dir:
        if rank == 0:
            os.makedirs(args.ckpt_dir, exist_ok=True)
            remove_leftovers(args.ckpt_dir, log)
            start = choose_checkpoint(args.ckpt_dir, log)
        t = torch.tensor([start], dtype=torch.int64, device=dev)
        dist.broadcast(t, src=0)
        start = int(t.item())
        if start:
            try:
                if rank != 0:
                    verify(args.ckpt_dir, start)
                state = torch.load(os.path.join(args.ckpt_dir, ckpt_name(start)), map_location="cpu")
            except (OSError, ValueError, RuntimeError) as e:
                log("resume_error", step=start, error=str(e))
                return EXIT_BAD_CHECKPOINT
            if state.get("config") != config_of(args):
                log("resume_error", step=start,
                    error="checkpoint written with %s, this run has %s" % (state.get("config"), config_of(args)))
                return EXIT_BAD_CHECKPOINT
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            metrics.set(ckpt_step=start)
    metrics.set(resumed=start, step=start, known=True)
    log("start", resumed_from_step=start, world_size=world, backend=backend,
        restart=int(os.environ.get("GPUCHAOS_RESTART", "0")))

    ddp = DDP(model, device_ids=[local_rank] if backend == "nccl" else None)
    ckpt = Checkpointer(args, rank, world, metrics, log) if args.ckpt_dir else None
    loss_fn = torch.nn.MSELoss()
    t_start = time.monotonic()
    stop = torch.zeros(1, device=dev)
    step = start
    metrics.set(up=1)
    try:
        while args.steps == 0 or step < args.steps:
            if args.max_seconds:
                # Every rank must leave the loop at the same step, or the
                # others wait in an all-reduce forever.
                stop.fill_(1.0 if time.monotonic() - t_start >= args.max_seconds else 0.0)
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                if stop.item() > 0:
                    break
            t0 = time.monotonic()
            step += 1
            x, y = batch(args, step, rank, teacher, dev)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if ckpt and step % args.ckpt_every == 0:
                ckpt.save(step, model, opt)
            elif ckpt:
                ckpt.check()
            now = time.monotonic()
            metrics.observe_step(step, now - t0, now)
            if step % args.log_every == 0:
                kw = {}
                if rank == 0:
                    # Only rank 0 writes, so only it knows the checkpoint state.
                    kw = {"last_checkpoint_step": metrics.ckpt_step, "checkpoint_failures": metrics.ckpt_failures}
                log("step", step=step, loss=round(loss.item(), 8), steps_per_second=round(metrics.rate, 3),
                    resumed_from_step=start, **kw)
        if ckpt:
            ckpt.wait()
    finally:
        metrics.set(up=0)
        if ckpt and ckpt.thread is not None:
            # Leaving on an exception or SIGTERM: let the write in flight
            # finish, so the newest checkpoint is complete rather than lost.
            ckpt.thread.join()
    elapsed = time.monotonic() - t_start
    log("done", step=step, resumed_from_step=start, seconds=round(elapsed, 6),
        steps_per_second=round((step - start) / elapsed, 3) if elapsed > 0 else 0.0,
        checkpoint_failures=metrics.ckpt_failures, params_sha256=params_digest(model))
    dist.barrier()
    dist.destroy_process_group()
    if srv:
        srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
