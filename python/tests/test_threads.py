"""The GIL is released while the library works: another Python thread goes on during a long
rewrite, and rewrites in several threads at once give what they give one at a time."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run, tool

CHAIN_NODES = 120_000  # a rewrite of about 1.5 s on one core (bench/gen_chain.cc)


def generate_chain(directory, nodes):
    path = directory / "chain.onnx"
    result = run([tool("ONNX_REWRITE_GEN_CHAIN", "gen-chain"), "--nodes", nodes, "--out", path])
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return generate_chain(tmp_path_factory.mktemp("chain"), CHAIN_NODES)


@pytest.fixture(scope="module")
def small_chain(tmp_path_factory):
    return generate_chain(tmp_path_factory.mktemp("small-chain"), 20_000)


TICK = 0.002  # seconds between the other thread's ticks


def longest_pauses(call, times):
    """Runs call() `times` times while another thread ticks every TICK seconds; per call, its duration and
    the longest the ticker went without a tick during it. A call holding the GIL stops the ticker
    for all of its length."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(TICK)

    windows = []
    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        for _ in range(times):
            time.sleep(0.05)
            start = time.perf_counter()
            call()
            windows.append((start, time.perf_counter()))
    finally:
        stop.set()
        thread.join()
    pauses = []
    for start, end in windows:
        during = [t for t in ticks if start <= t <= end]
        gaps = [b - a for a, b in zip([start] + during, during + [end])]
        pauses.append((end - start, max(gaps)))
    return pauses


def assert_other_thread_ran(pauses):
    # Ten ticks at least, or a call holding the GIL could look like one that let the ticker run.
    for duration, _ in pauses:
        assert duration > 10 * TICK, f"a call took {duration:.3f} s: too short to tell; make the chain longer"
    ratios = sorted(pause / duration for duration, pause in pauses)
    # The median: one pause of the scheduler's on a busy machine is not the GIL.
    assert ratios[len(ratios) // 2] < 0.5, f"the other thread stopped for most of each call: {pauses}"


def test_another_thread_runs_during_a_rewrite(onnx_rewrite, chain):
    results = []
    pauses = longest_pauses(lambda: results.append(onnx_rewrite.rewrite(chain, target="ort")), 2)
    assert all(r.target_met and r.rules["fuse-gelu-erf"].matches > 1000 for r in results)
    assert_other_thread_ran(pauses)


def test_checking_serializing_and_saving_release_it_too(onnx_rewrite, chain, tmp_path):
    result = onnx_rewrite.rewrite(chain, target="onnx")
    assert_other_thread_ran(longest_pauses(lambda: onnx_rewrite.check(chain, target="onnx"), 5))
    assert_other_thread_ran(longest_pauses(result.model_bytes, 5))
    output = tmp_path / "saved.onnx"
    assert_other_thread_ran(longest_pauses(lambda: result.save(output), 5))


def test_rewrites_in_threads_at_once_are_the_same_as_one_at_a_time(onnx_rewrite, small_chain, tmp_path):
    chain = small_chain
    alone = {target: onnx_rewrite.rewrite(chain, target=target).model_bytes() for target in ("onnx", "ort")}
    rules = onnx_rewrite.builtin_rules()  # one rule set shared by every thread

    def job(index):
        target = ("onnx", "ort")[index % 2]
        output = tmp_path / f"out-{index}.onnx"
        onnx_rewrite.rewrite(chain, target=target, rules=rules, builtin_rules=False, output=output)
        return target, output.read_bytes()

    with ThreadPoolExecutor(max_workers=4) as pool:
        for target, data in pool.map(job, range(4)):
            assert data == alone[target]
