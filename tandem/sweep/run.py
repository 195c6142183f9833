"""Running a sweep's points: one point (``evaluate``), and the engines that run many.

``evaluate(point)`` builds the point's machine (the base config with the setting's config values and spec
parameters, and its spec file), runs the workload through the one run flow (a layer: ``tandem.flows.run.run``;
a network: ``tandem.network.run.run_network`` in int8) and returns the results row: validated, cycles,
energy, area, DRAM bytes, the recorded metrics and, for a network, its per-layer table. It never raises: a
point that fails is a row with its error, and the sweep goes on. Compiled kernels are found in and kept in
the kernel cache on disk (tandem/flows/kernel_cache.py): a sweep run again, or a regression suite
(tandem/regress/) run again on unchanged code, compiles nothing it compiled before.

Engines: ``local`` runs the points on a process pool (``jobs`` processes; 1: in this process), ``ray`` as
Ray tasks (``address``: an existing cluster; none: a local one of ``jobs`` CPUs). Both give the same rows:
the points are deterministic and each row is written by this process, in its own transaction, as its
point finishes (tandem/sweep/results.py), so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tandem.sweep.file import Point, Sweep, SweepError, point_key, points

ENGINES = ("local", "ray")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def machine(point: Point) -> Any:
    """The Target of ``point``: the base config with its setting applied."""
    from tandem.flows.targets import load_config, load_target

    base = load_config(point.target, point.config)
    setting = dict(point.setting)
    spec = setting.pop("spec", point.spec)
    isa_params = {k.split(".", 1)[1]: v for k, v in setting.items() if k.startswith("isa_params.")}
    values = {k: v for k, v in setting.items() if not k.startswith("isa_params.")}
    label = ",".join(f"{k.removeprefix('isa_params.')}={v}" for k, v in point.setting
                     if k != "spec") or base.name
    config = dataclasses.replace(base, name=f"{base.name}[{label}]" if point.setting else base.name,
                                 isa_params=MappingProxyType({**base.isa_params, **isa_params}), **values)
    return load_target(point.target, config, spec)


def evaluate(point: Point) -> dict[str, Any]:
    """The results row of ``point`` (without its key): measured, or failed with the error."""
    start = time.perf_counter()
    row: dict[str, Any] = {"sweep": point.sweep, "idx": point.index, "target": point.target,
                           "workload": point.workload.name, "setting": dict(point.setting),
                           "status": "failed"}
    try:
        target = machine(point)
        row["config"] = target.config.name
        if point.workload.op is not None:
            from tandem.flows.kernel_cache import KernelCache
            from tandem.flows.run import run

            report = run(point.workload.op, target, {**dict(point.workload.params), "seed": point.seed},
                         cache=KernelCache.default())
            result = report.to_json()
            layers = None
        else:
            network = _network(point, target)
            result = network.totals()
            layers = [{"step": r.step, "op": r.op, "where": r.where, "cycles": r.cycles,
                       "energy_uj": r.energy_uj, "macs": r.macs} for r in network.rows]
        row.update(status="ok", validated=bool(result["validated"]), cycles=result["cycles"],
                   energy_uj=result.get("energy_uj"), area_mm2=result.get("area_mm2"),
                   dram_bytes=result.get("dram_bytes"), layers=layers,
                   metrics={k: result.get(k) for k in point.record})
        if not row["validated"]:
            row.update(status="invalid", error=result.get("detail") or "the output differs from numpy")
    except Exception as e:  # noqa: BLE001 - a failed point is a row, not the end of the sweep
        row["error"] = f"{type(e).__name__}: {e}"
        if type(e).__module__.split(".")[0] not in ("isa", "compiler", "sim", "tandem"):
            row["error"] += "\n" + "".join(traceback.format_exception(e)[-3:])   # not one of our typed errors
    row["point_s"] = round(time.perf_counter() - start, 4)
    return row


def _network(point: Point, target: Any):
    """A network workload in int8 on ``target``: a QDQ model with its own quantization, any other
    quantized with VTA's rule (tandem/network/load.py, as ``tandem model --target`` loads it)."""
    from tandem.flows.kernel_cache import KernelCache
    from tandem.network.load import load_network
    from tandem.network.run import run_inputs, run_network

    w = point.workload
    q = load_network(w.onnx, builtin=w.model, seed=point.seed,
                     input_shapes={k: tuple(v) for k, v in w.input_shape}).quantized
    return run_network(q, target, run_inputs(q.graph, point.seed), cache=KernelCache.default())


# ----------------------------------------------------------------------------------------------- engines
@dataclass
class Summary:
    """What a sweep run did: points in the sweep, already stored, run now, failed now, wall time, and the
    points' own time summed (for the engine's overhead)."""

    points: int
    skipped: int
    ran: int
    failed: int
    wall_s: float
    startup_s: float
    point_s: float
    jobs: int
    engine: str

    @property
    def overhead_pct(self) -> float | None:
        """The engine's time per point beyond the point's own, as a share of it: ((wall - startup) x
        workers - the points' times summed) / that sum; the one-time start (workers spawned, Ray started,
        imports) is ``startup_s``."""
        if not self.ran or not self.point_s:
            return None
        workers = min(self.jobs, self.ran)
        return 100.0 * ((self.wall_s - self.startup_s) * workers - self.point_s) / self.point_s

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "overhead_pct": self.overhead_pct}


class Pending:
    """The points of a sweep not yet in the store, with their keys, made as they are taken: a point's key
    needs its machine (config and spec, built once per setting, the points of a setting being consecutive),
    so nothing is built for a point before the engine asks for it. ``skipped`` counts the points already
    stored that the iteration has passed."""

    def __init__(self, sweep: Sweep, done: set[str], version: str) -> None:
        self.sweep, self.done, self.version = sweep, done, version
        self.total = sweep.count
        self.skipped = 0

    def __iter__(self) -> Iterator[tuple[str, Point]]:
        from tandem.flows.targets import load_config

        setting, built = None, None
        for point in points(self.sweep):
            if point.setting != setting:
                setting = point.setting
                try:
                    target = machine(point)
                    built = (target.config, target.spec)
                except Exception:  # noqa: BLE001 - a machine that does not build still gets a row, keyed
                    built = (load_config(point.target, point.config), None)   # by its setting
            key = point_key(point, *built, self.version)
            if key in self.done:
                self.skipped += 1
                continue
            yield key, point


def warm(_: int = 0) -> int:
    """Import what a point runs (a worker's one-time cost, paid before the first point is timed)."""
    import tandem.flows.diannao  # noqa: F401
    import tandem.flows.vita  # noqa: F401
    import tandem.network.run  # noqa: F401

    return os.getpid()


class Engine:
    """Runs points: ``start`` (the engine's one-time cost: workers started and warmed), then ``run`` yields
    each point's row with its key as the points finish, then ``stop``."""

    def __init__(self, jobs: int, address: str | None = None) -> None:
        self.jobs, self.address = jobs, address

    def start(self) -> None:
        warm()

    def run(self, todo: Iterable[tuple[str, Point]]) -> Iterator[dict[str, Any]]:
        for key, point in todo:
            yield {"key": key, **evaluate(point)}

    def stop(self) -> None:
        pass


class LocalEngine(Engine):
    """A pool of ``jobs`` processes (spawned: no state inherited from this one)."""

    def start(self) -> None:
        import multiprocessing

        # one thread per worker for numpy's libraries, as Ray gives its workers: jobs workers on jobs cores
        saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
        os.environ.update(dict.fromkeys(THREAD_VARIABLES, "1"))
        try:
            self.pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"))
            list(self.pool.map(warm, range(self.jobs)))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def run(self, todo: Iterable[tuple[str, Point]]) -> Iterator[dict[str, Any]]:
        """At most two points per worker in flight: the points are made as the workers take them."""
        queue = iter(todo)
        flying: dict[Any, str] = {}
        while True:
            for key, point in itertools.islice(queue, 2 * self.jobs - len(flying)):
                flying[self.pool.submit(evaluate, point)] = key
            if not flying:
                return
            finished, _ = wait(flying, return_when=FIRST_COMPLETED)
            for future in finished:
                yield {"key": flying.pop(future), **future.result()}

    def stop(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayEngine(Engine):
    """Ray tasks, on the cluster at ``address`` or on a local Ray of ``jobs`` CPUs started here."""

    def start(self) -> None:
        self.ray = ray = import_ray()
        self.started = not ray.is_initialized()
        if self.started and self.address:
            ray.init(address=self.address, log_to_driver=False)
        elif self.started:
            ray.init(num_cpus=self.jobs, include_dashboard=False, log_to_driver=False)
        self.evaluate = ray.remote(evaluate)
        self.cpus = int(ray.available_resources().get("CPU", self.jobs))
        warmer = ray.remote(warm)
        ray.get([warmer.remote(k) for k in range(self.cpus)])

    def run(self, todo: Iterable[tuple[str, Point]]) -> Iterator[dict[str, Any]]:
        """One task per point, at most two per CPU in flight (the scheduler and ``wait`` see a short
        list; tasks of several points measured no faster)."""
        queue = iter(todo)
        flying: dict[Any, str] = {}
        limit = 2 * self.cpus
        while True:
            for key, point in itertools.islice(queue, limit - len(flying)):
                flying[self.evaluate.remote(point)] = key
            if not flying:
                return
            ready, _ = self.ray.wait(list(flying), num_returns=1)
            for ref in ready:
                yield {"key": flying.pop(ref), **self.ray.get(ref)}

    def stop(self) -> None:
        if self.started:
            self.ray.shutdown()


def engine_for(name: str, jobs: int, address: str | None = None, points: int = 0) -> Engine:
    """The engine ``name`` (local: in this process when one job or one point would run)."""
    if name == "ray":
        return RayEngine(jobs, address)
    if name != "local":
        raise SweepError(f"unknown engine {name!r}; engines are {', '.join(ENGINES)}")
    return Engine(1) if jobs == 1 or points <= 1 else LocalEngine(jobs)


def import_ray():
    try:
        import ray
    except ImportError:
        raise SweepError("the ray engine needs Ray, an optional extra: pip install -e \".[dist]\" (or pip "
                         "install 'ray>=2.60,<3')") from None
    return ray


def sweep(sweep_def: Sweep, store: Any, version: str, engine: str = "local", jobs: int | None = None,
          address: str | None = None, on_row: Callable[[dict[str, Any], int, int], None] | None = None
          ) -> Summary:
    """Run the points of ``sweep_def`` not yet in ``store``, storing each row as it finishes;
    ``on_row(row, done, total)`` after each."""
    if engine not in ENGINES:
        raise SweepError(f"unknown engine {engine!r}; engines are {', '.join(ENGINES)}")
    if engine == "ray":
        import_ray()
    jobs = jobs or os.cpu_count() or 1
    todo = Pending(sweep_def, store.done(), version)
    ran = failed = 0
    point_s = startup_s = 0.0
    start = time.perf_counter()
    queue = iter(todo)
    first = next(queue, None)
    if first is not None:
        runner = engine_for(engine, jobs, address, todo.total - todo.skipped)
        runner.start()
        startup_s = time.perf_counter() - start
        try:
            for row in runner.run(itertools.chain([first], queue)):
                store.put(row)
                ran += 1
                failed += row["status"] != "ok"
                point_s += row["point_s"]
                if on_row is not None:
                    on_row(row, todo.skipped + ran, todo.total)
        finally:
            runner.stop()
    return Summary(todo.total, todo.skipped, ran, failed, time.perf_counter() - start, startup_s, point_s,
                   jobs, engine)
