"""Paired A/B latency: two installed envs timed in the same time window, call by call.

`harness check --against PYTHON` (harness/cli/paired.py) starts one long-lived timing worker per env -
this interpreter (the new side) and PYTHON (the old side), each its own process running this module
(`python -m harness.designs.paired`) with this harness on its path, so both time the same code
against their own transformers and torch - both pinned to the same one core (`shared_core`), each
loading the same zoo model and the same prompts. Only one worker runs at a time (the driver waits
for each reply), so one core costs nothing, and it removes a bias two cores had: on this 2-vCPU VM a
worker that the scheduler kept on the other vCPU ran 2-6 % slower for the whole run (A/A decode
x1.04-1.06, generate() x1.02, significant), where both on one core read x0.995-1.014. The driver (`pair`) then alternates them call by call in ABBA blocks:

    block k (k even):  new old old new        block k (k odd):  old new new old
    d_k = 1/2 [log(new_1 / old_1) + log(new_2 / old_2)]    (the two neighbouring pairs)

so a sample of one env and its neighbour of the other share the host's state (a neighbour's load,
the clock, the cache) and it cancels in their ratio; a drift linear over a block cancels exactly, and
alternating which env opens a block cancels an advantage of going first. The d_k are decided by
`stats.paired_slowdown_test` (Yuen's trimmed mean, SE from the blocks) and
`compare_stats.latency_outcome` (`latency_tolerance`, no pass without power), on the CPU time and on
the wall clock (`compare_stats.compare_paired`). No calibration is needed: each env is the other's.

The fields (`FIELDS`) are the latency suite's (harness/designs/latency.py) timed the same way: prefill
(best of 3 calls into a fresh cache), decode (best of 2 runs of DECODE_STEPS steps over a prefilled
cache, per step), generate() per path (one call), each with the memory torch allocates in one call
(`memory_<field>`, deterministic: asked once per env), and the serving case's three (`_serving`):
the compiled static-cache generate() in its steady state, the batching prompts through generate() one
after another, and one generate_batch of them - unpaired, generate_batch spread its calibration by
26-41 % and was information only; paired, its neighbour of the other env is its calibration. A user
model's (`user_fields`: its checkpoint from [tool.harness.models] or --model, resolved in each env):
prefill and decode over a dynamic cache, generate() per path but MTP.

Protocol: one JSON object per line on the worker's stdin, one reply per line on its stdout -
``hello``; ``prepare`` (build a field's call and warm it up); ``time`` (the best of the field's inner
calls: wall and CPU seconds; ``slow`` adds CPU work in proportion to each call, for the benchmark);
``memory``; ``quit``. A call that raises is the reply's ``error``.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.settings.models import UserModel

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PROTOCOL = 1
WARMUP = 2  # untimed calls of each field before its first timed one
MIN_BLOCKS, MAX_BLOCKS = 16, 400  # blocks per field, whatever the time budget buys


@dataclass(frozen=True)
class PairedField:
    """One paired latency field: `case` (the latency suite's case id), `name` (its field), the inner
    calls a sample is the best of, and the count a sample is divided by (decode: per step)."""

    case: str
    name: str
    inner: int = 1
    per: int = 1

    @property
    def key(self) -> str:
        return f"{self.case}/{self.name}"


def _fields() -> tuple[PairedField, ...]:
    from harness.subjects.hf_latency import DECODE_STEPS

    prefill = [PairedField("llama-target.prefill", f"prefill_{p}_{k}", inner=3)
               for p in ("short", "long") for k in ("dynamic", "static")]
    decode = [PairedField("llama-target.decode", f"decode_{k}", inner=2, per=DECODE_STEPS) for k in ("dynamic", "static")]
    generate = [PairedField("llama-target.generate", f"generate_{p}") for p in ("plain", "assisted", "prompt_lookup", "ensemble")]
    mtp = [PairedField("glm4moe-mtp.generate", f"generate_{p}") for p in ("plain", "mtp")]
    serving = [PairedField("llama-target.serving", f"generate_{p}") for p in ("compiled", "sequential", "batch")]
    return (*prefill, *decode, *generate, *mtp, *serving)


FIELDS = _fields()


def user_fields(users: Sequence[UserModel]) -> tuple[PairedField, ...]:
    """A user model's fields: prefill and decode over a dynamic cache (its first prompt), and one greedy
    generate() per path the latency suite's `<name>.generate` times (`timed_paths`), plain first."""
    from harness.cases.latency import timed_paths
    from harness.subjects.hf_latency import DECODE_STEPS

    out: list[PairedField] = []
    for m in users:
        out += [PairedField(f"{m.name}.prefill", "prefill_dynamic", inner=3),
                PairedField(f"{m.name}.decode", "decode_dynamic", inner=2, per=DECODE_STEPS)]
        out += [PairedField(f"{m.name}.generate", f"generate_{p}")
                for p in ("plain", *(p for p in timed_paths(m) if p != "plain"))]
    return tuple(out)


def select(patterns: Sequence[str], users: Sequence[UserModel] = ()) -> tuple[PairedField, ...]:
    """The fields - the zoo's, then each user model's - whose key contains any of `patterns` (all without)."""
    every = (*FIELDS, *user_fields(users))
    if not patterns:
        return every
    return tuple(f for f in every if any(p in f.key for p in patterns))


def user_spec(m: UserModel) -> dict[str, Any]:
    """What a worker needs to load a user model as the driver resolved it (JSON)."""
    return {"name": m.name, "path": str(m.path), "assistant": str(m.assistant) if m.assistant else None,
            "dtype": m.dtype, "prompts_file": str(m.prompts_file) if m.prompts_file else None, "paths": list(m.paths)}


def user_model(spec: dict[str, Any]) -> UserModel:
    """`user_spec` back, resolved in the worker's env (harness/settings/models.py `resolve`)."""
    from harness.settings.models import resolve

    def path(key: str) -> Path | None:
        return Path(spec[key]) if spec.get(key) else None
    return resolve(UserModel(spec["name"], Path(spec["path"]), "--against", assistant=path("assistant"),
                             dtype=spec.get("dtype"), prompts_file=path("prompts_file"), paths=tuple(spec["paths"])))


# ----------------------------------------------------------------------------------------------
# the worker (runs in each env)


def build(zoo: Zoo, field: PairedField) -> tuple[Callable[..., Any], Callable[[], Any] | None]:
    """The field's timed call and its untimed per-call setup (None), as the latency suite times it."""
    from harness import cases
    from harness.subjects import hf_latency

    if field.case.split(".", 1)[0] in zoo.checkpoints.user:
        return _user(zoo, field)
    case = next(c for c in cases.latency() if c.id == field.case)
    kind = field.name.rsplit("_", 1)[-1]
    if field.name.startswith("prefill_"):
        prompt = field.name.split("_")[1]
        return hf_latency.prefill(zoo.load(case.model).model, zoo.prompt_ids(case.model, f"{prompt}-0"), kind), None
    ids = zoo.prompt_ids(case.model, "short-0")
    if case.id.endswith(".serving"):
        return _serving(zoo, case, field.name, ids), None
    if field.name.startswith("decode_"):
        model = zoo.load(case.model).model
        return hf_latency.decode_steps(model), hf_latency.decode_setup(model, ids, kind)
    path = field.name.removeprefix("generate_")
    call = hf_latency.generate_path(zoo, case.model, path, ids, case.new_tokens, case.draft_tokens,
                                    weight=case.param("weight") if path == "ensemble" else None,
                                    assistant=case.assistant if path in ("assisted", "ensemble") else None)
    return _raising(call), None


def _raising(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` (a generate() path returning `Generated`), raising the error it returned as data: a
    field whose call fails is `not compared` with it, never timed."""
    def checked() -> Any:
        got = call()
        if got.error is not None:
            raise RuntimeError(f"{got.error.get('type')}: {got.error.get('message')}")
        return got
    return checked


def _user(zoo: Zoo, field: PairedField) -> tuple[Callable[..., Any], Callable[[], Any] | None]:
    """A user model's field (`user_fields`) on its first prompt (its own, else the zoo's short-0)."""
    from harness.cases.common import DRAFT_TOKENS, ENSEMBLE_WEIGHTS, NEW_TOKENS
    from harness.subjects import hf_latency

    name = field.case.split(".", 1)[0]
    owner = zoo.checkpoints.user[name]
    ids = zoo.prompt_ids(name, owner.prompts[0].id if owner.prompts else "short-0")
    model = zoo.load(name).model
    if field.name == "prefill_dynamic":
        return hf_latency.prefill(model, ids, "dynamic"), None
    if field.name == "decode_dynamic":
        return hf_latency.decode_steps(model), hf_latency.decode_setup(model, ids, "dynamic")
    path = field.name.removeprefix("generate_")
    call = hf_latency.generate_path(zoo, name, path, ids, NEW_TOKENS, DRAFT_TOKENS,
                                    weight=ENSEMBLE_WEIGHTS[0] if path == "ensemble" else None,
                                    assistant=owner.assistant_name if path in ("assisted", "ensemble") else None)
    return _raising(call), None


def _serving(zoo: Zoo, case: Any, name: str, ids: Any) -> Callable[[], Any]:
    """A serving field's call as the latency suite's serving case makes it: the compiled static-cache
    generate() (its first call, which compiles, is the warm-up), the SERVING_PROMPTS through generate()
    one after another, or one generate_batch of them - a call that raised or a request that failed
    raises, so the field is `not compared` with it (5.13 / 5.14's generate_batch without psutil)."""
    from harness.designs.latency import SERVING_PROMPTS
    from harness.subjects import hf_compiled, hf_latency

    model = zoo.load(case.model).model
    prompts = [zoo.prompt_ids(case.model, p)[0].tolist() for p in SERVING_PROMPTS]
    if name == "generate_compiled":
        hf_compiled.reset()
        call: Callable[[], Any] = hf_latency.compiled_generate(model, ids, case.new_tokens)
    elif name == "generate_sequential":
        call = hf_latency.sequential_generate(model, prompts, case.new_tokens, zoo.device)
    else:
        call = hf_latency.continuous_batch(model, prompts, case.new_tokens)

    def checked() -> Any:
        got = call()
        for one in got if isinstance(got, list) else [got]:
            error = getattr(one, "error", None) or next((e for e in getattr(one, "request_errors", ()) or () if e), None)
            if error:
                raise RuntimeError(f"{error.get('type')}: {error.get('message')}" if isinstance(error, dict) else error)
        return got
    return checked


def slowed(fn: Callable[..., Any], fraction: float) -> Callable[..., Any]:
    """fn, then a CPU-bound spin for `fraction` x the call's own wall time: a slowdown that computes,
    in proportion to the call, never a sleep (the benchmark's injection). It spins on the wall clock,
    so the call's wall time grows by exactly that fraction (a spin on the CPU clock read x1.07 for
    5 % on the loaded host: the spin is descheduled too)."""
    if not fraction:
        return fn

    def run(*args: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args)
        until = time.perf_counter() + fraction * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return out
    return run


class Server:
    """The worker's state: the zoo and each prepared field's call."""

    def __init__(self, models_dir: str, threads: int, users: Sequence[dict[str, Any]] = ()) -> None:
        import torch

        from harness.subjects.hf import Zoo

        torch.set_num_threads(threads)
        self.users = [user_model(u) for u in users]
        self.zoo = Zoo(models_dir, user=self.users)
        self.fields = {f.key: f for f in (*FIELDS, *user_fields(self.users))}
        self.calls: dict[str, tuple[PairedField, Callable[..., Any], Callable[[], Any] | None]] = {}

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "hello":
            import torch
            import transformers

            return {"protocol": PROTOCOL, "transformers": transformers.__version__, "torch": torch.__version__,
                    "python": sys.version.split()[0], "pid": os.getpid(), "cores": sorted(os.sched_getaffinity(0)),
                    "threads": torch.get_num_threads()}
        field = self.fields[msg["field"]]
        if op == "prepare":
            fn, setup = build(self.zoo, field)
            self.calls[field.key] = (field, fn, setup)
            for _ in range(WARMUP):
                fn(setup()) if setup is not None else fn()
            gc.collect()
            return {"ok": True}
        _, fn, setup = self.calls[field.key]
        if op == "time":
            return dict(zip(("wall", "cpu"), best_of(slowed(fn, float(msg.get("slow", 0.0))), field, setup),
                            strict=True))
        if op == "memory":
            from harness.subjects import timing

            state = setup() if setup is not None else None
            return timing.peak_memory(lambda: fn(state) if setup is not None else fn())
        raise ValueError(f"unknown op {op!r}")


def best_of(fn: Callable[..., Any], field: PairedField, setup: Callable[[], Any] | None) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of the field's inner calls (setup untimed), / field.per;
    the garbage collector off while timed (as the latency suite)."""
    best = (math.inf, 0.0)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(field.inner):
            arg = setup() if setup is not None else None
            wall, cpu = time.perf_counter(), time.process_time()
            fn(arg) if setup is not None else fn()
            best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    finally:
        if enabled:
            gc.enable()
    return best[0] / field.per, best[1] / field.per


def serve(models_dir: str, threads: int, users: Sequence[dict[str, Any]] = ()) -> None:
    """The worker's loop: a request per stdin line, a reply per stdout line (an exception is the
    reply's error, type and message)."""
    server = Server(models_dir, threads, users)
    out = sys.stdout
    sys.stdout = sys.stderr  # what the library prints goes to stderr, never into the replies
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("op") == "quit":
            break
        try:
            reply = server.handle(msg)
        except Exception as exc:  # noqa: BLE001 - the driver decides what a failed call means
            reply = {"error": {"type": type(exc).__name__, "message": str(exc)[:500]}}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ----------------------------------------------------------------------------------------------
# the driver


def shared_core() -> list[int]:
    """The one core both workers are pinned to: the lowest of this process's set."""
    return [min(os.sched_getaffinity(0))]


class Asks(Protocol):
    """What the driver needs of a worker: one request, one reply (tests use a fake)."""

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]: ...


class WorkerError(RuntimeError):
    """A worker that did not start, or answered nothing."""


class Worker:
    """A timing worker: `python -m harness.designs.paired` under `python`, with this harness first on
    its path (both envs time the same code), pinned to `cores`."""

    def __init__(self, python: str, models_dir: Path, cores: Sequence[int], threads: int = 1,
                 users: Sequence[UserModel] = ()) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": str(threads)}
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "harness.designs.paired", str(models_dir), str(threads),
                 json.dumps([user_spec(m) for m in users])], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        except OSError as exc:
            raise WorkerError(f"{python}: cannot start a timing worker: {exc}") from exc
        os.sched_setaffinity(self.proc.pid, set(cores))
        self.python = python

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise WorkerError(f"the timing worker of {self.python} stopped: {err.strip()[-800:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


@dataclass
class Paired:
    """One field's pairing: the block log ratios d_k, each side's per-call wall and CPU times in
    call order, and the error of a side that could not run it ("" when both did)."""

    field: PairedField
    blocks: list[float]
    new: list[float]
    old: list[float]
    new_cpu: list[float]
    old_cpu: list[float]
    seconds: float = 0.0
    error: str = ""


def _time(worker: Asks, field: PairedField, slow: float) -> tuple[float, float]:
    reply = worker.ask({"op": "time", "field": field.key, "slow": slow})
    if "error" in reply:
        raise WorkerError(f"{reply['error']['type']}: {reply['error']['message']}")
    return float(reply["wall"]), float(reply["cpu"])


def blocks_for(seconds_per_call: float, budget: float) -> int:
    """How many ABBA blocks (4 requests each) fit `budget` seconds at `seconds_per_call` (one
    request's wall time as the driver sees it: the inner calls, their setup, the IPC), within
    [MIN_BLOCKS, MAX_BLOCKS] - fixed before any block is timed, so the count never depends on the d_k."""
    if seconds_per_call <= 0:
        return MAX_BLOCKS
    return max(MIN_BLOCKS, min(MAX_BLOCKS, int(budget / (4 * seconds_per_call))))


def pair(new: Asks, old: Asks, field: PairedField, budget: float, slow_new: float = 0.0,
         slow_old: float = 0.0, blocks: int | None = None) -> Paired:
    """Prepare `field` in both workers, then time it in ABBA blocks (module docstring) for about
    `budget` seconds (`blocks_for`, from one timed call of each; or exactly `blocks`). `slow_*`
    inject CPU work into a side (benchmarks/paired_power.py)."""
    start = time.perf_counter()
    for side, worker in (("new", new), ("old", old)):
        reply = worker.ask({"op": "prepare", "field": field.key})
        if "error" in reply:
            return Paired(field, [], [], [], [], [], error=f"{side}: {reply['error']['type']}: {reply['error']['message']}")
    try:
        if blocks is None:  # one request of each side, as the blocks will make them (setup, IPC included)
            probe = time.perf_counter()
            _time(new, field, slow_new), _time(old, field, slow_old)
            blocks = blocks_for((time.perf_counter() - probe) / 2, budget)
        out = Paired(field, [], [], [], [], [])
        for k in range(blocks):
            order = (new, old, old, new) if k % 2 == 0 else (old, new, new, old)
            walls: dict[int, list[tuple[float, float]]] = {id(new): [], id(old): []}
            for worker in order:
                walls[id(worker)].append(_time(worker, field, slow_new if worker is new else slow_old))
            (n1, nc1), (n2, nc2) = walls[id(new)]
            (o1, oc1), (o2, oc2) = walls[id(old)]
            out.blocks.append(0.5 * (math.log(n1 / o1) + math.log(n2 / o2)))
            out.new += [n1, n2]
            out.old += [o1, o2]
            out.new_cpu += [nc1, nc2]
            out.old_cpu += [oc1, oc2]
    except WorkerError as exc:
        return Paired(field, [], [], [], [], [], error=str(exc))
    out.seconds = time.perf_counter() - start
    return out


def memory(new: Asks, old: Asks, field: PairedField) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Each side's bytes allocated in one call of a prepared field (None if either failed)."""
    got = new.ask({"op": "memory", "field": field.key}), old.ask({"op": "memory", "field": field.key})
    return None if any("error" in g for g in got) else got


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]) if len(sys.argv) > 3 else ())
