"""sim/core/events.py: the engine resumes processes in exactly simpy's order (delays, signals fired and
waited on, starts), so a machine moved onto it keeps its every cycle; negative delays are refused."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.events import Engine


@st.composite
def scripts(draw) -> list[list[tuple[str, int]]]:
    """A few processes, each a list of steps: a delay, firing a signal, or waiting on one (each signal is
    waited on by one process at most, and fired by another or by none)."""
    count = draw(st.integers(1, 4))
    processes: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    signals = 0
    for _ in range(draw(st.integers(1, 24))):
        who = draw(st.integers(0, count - 1))
        kind = draw(st.sampled_from(["delay", "delay", "wait", "fire"]))
        if kind == "delay":
            processes[who].append(("delay", draw(st.integers(0, 3))))
        elif kind == "wait":
            processes[who].append(("wait", signals))
            if count > 1 and draw(st.booleans()):
                firer = draw(st.sampled_from([p for p in range(count) if p != who]))
                at = draw(st.integers(0, len(processes[firer])))
                processes[firer].insert(at, ("fire", signals))
            signals += 1
    return processes


def run_simpy(script: list[list[tuple[str, int]]]) -> list[tuple]:
    env = simpy.Environment()
    events: dict[int, simpy.Event] = {}
    log: list[tuple] = []

    def process(name: int, steps: list[tuple[str, int]]):
        for k, (kind, arg) in enumerate(steps):
            if kind == "delay":
                yield env.timeout(arg)
            elif kind == "fire":
                events.setdefault(arg, env.event()).succeed((name, k))
            else:
                got = yield events.setdefault(arg, env.event())
                log.append(("woken", env.now, name, got))
            log.append((env.now, name, k))
    for name, steps in enumerate(script):
        env.process(process(name, steps))
    env.run()
    return log


def run_engine(script: list[list[tuple[str, int]]]) -> list[tuple]:
    engine = Engine()
    signals: dict = {}
    log: list[tuple] = []

    def process(name: int, steps: list[tuple[str, int]]):
        for k, (kind, arg) in enumerate(steps):
            if kind == "delay":
                yield arg
            elif kind == "fire":
                engine.fire(signals.setdefault(arg, engine.signal()), (name, k))
            else:
                got = yield signals.setdefault(arg, engine.signal())
                log.append(("woken", engine.now, name, got))
            log.append((engine.now, name, k))
    for name, steps in enumerate(script):
        engine.start(process(name, steps))
    engine.run()
    return log


@settings(max_examples=300)
@given(scripts())
def test_the_engine_resumes_processes_in_simpy_s_order(script) -> None:
    assert run_engine(script) == run_simpy(script)


def test_a_process_that_waits_on_a_signal_already_handled_goes_on_at_once() -> None:
    script = [[("fire", 0), ("delay", 2)], [("delay", 1), ("wait", 0), ("delay", 1)]]
    assert run_engine(script) == run_simpy(script)
    assert ("woken", 1, 1, (0, 0)) in run_engine(script)


def test_a_negative_delay_is_refused() -> None:
    engine = Engine()

    def process():
        yield -1
    engine.start(process())
    with pytest.raises(ValueError, match="negative delay"):
        engine.run()


def test_a_process_started_during_the_run_goes_before_the_normal_events_of_its_time() -> None:
    """simpy starts a process urgently: B, started after the signal C waits on was fired, runs first."""
    log: list[str] = []
    env = simpy.Environment()
    event = env.event()

    def b_simpy():
        log.append("B")
        yield env.timeout(0)

    def a_simpy():
        yield env.timeout(1)
        event.succeed()
        env.process(b_simpy())

    def c_simpy():
        yield event
        log.append("C")
    env.process(a_simpy())
    env.process(c_simpy())
    env.run()

    mine: list[str] = []
    engine = Engine()
    signal = engine.signal()

    def b():
        mine.append("B")
        yield 0

    def a():
        yield 1
        engine.fire(signal)
        engine.start(b())

    def c():
        yield signal
        mine.append("C")
    engine.start(a())
    engine.start(c())
    engine.run()
    assert mine == log == ["B", "C"]
