"""Benchmark: autogradlab capture + layout + SVG against torchviz make_dot(show_saved=True) + graphviz dot.

Run from the repository root:

    .venv/bin/python widgets/benchmarks/bench_graph.py [--repeat 5] [--dot-timeout 300]

Prints one table: for every graph, our capture time and layout+SVG time (best and
median of ``--repeat`` runs, whole graph drawn, no collapsing), torchviz's graph
building and ``dot -Tsvg`` times on the same graph, and the speed-up. Targets from the
issue: 1,000 nodes under 50 ms, 5,000 nodes under 500 ms, at least 10x faster than
torchviz + dot from 1,000 nodes up. Then a few robustness checks of torchviz. The load
average is printed before and after, since other work on the machine slows both sides.

This is a benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_models import GRAPHS  # noqa: E402

from autogradlab.graph import capture  # noqa: E402
from autogradlab.render import to_svg  # noqa: E402


def timed(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3, statistics.median(times) * 1e3, result


def ours(loss, params, repeat):
    best_c, med_c, graph = timed(lambda: capture(loss, params=params), repeat)
    best_r, med_r, svg = timed(lambda: to_svg(graph, collapse=False), repeat)
    best_t, med_t, _ = timed(lambda: to_svg(capture(loss, params=params), collapse=False), repeat)
    return {
        "nodes": len(graph.nodes),
        "capture": (best_c, med_c),
        "render": (best_r, med_r),
        "total": (best_t, med_t),
        "svg_kb": len(svg) / 1e3,
    }


def torchviz_time(loss, params, dot_timeout):
    from torchviz import make_dot

    result = {"make_dot": None, "dot": None, "note": ""}
    limit = sys.getrecursionlimit()
    start = time.perf_counter()
    try:
        graph = make_dot(loss, params=params, show_saved=True)
    except RecursionError:
        result["note"] = "RecursionError at the default limit; "
        sys.setrecursionlimit(100_000)
        start = time.perf_counter()
        try:
            graph = make_dot(loss, params=params, show_saved=True)
        except RecursionError:
            result["note"] += "also with limit 100000"
            return result
        finally:
            sys.setrecursionlimit(limit)
        result["note"] += "timed with the limit raised to 100000; "
    result["make_dot"] = (time.perf_counter() - start) * 1e3
    source = graph.source
    result["dot_nodes"] = sum(1 for line in source.splitlines() if " [" in line and "->" not in line)
    start = time.perf_counter()
    try:
        subprocess.run(["dot", "-Tsvg"], input=source.encode(), capture_output=True, check=True, timeout=dot_timeout)
        result["dot"] = (time.perf_counter() - start) * 1e3
    except subprocess.TimeoutExpired:
        result["note"] += f"dot did not finish in {dot_timeout} s"
    return result


def robustness() -> list[str]:
    """What torchviz does in the situations the course shows, and what capture reports."""
    from torchviz import make_dot

    lines = []
    torch.manual_seed(0)

    def after_backward():
        w = torch.randn(3, requires_grad=True)
        y = (w.exp() * 2).sum()
        y.backward()
        return y

    def stale():
        w = torch.randn(3, requires_grad=True)
        u = w * 2
        v = u.pow(2)
        u.add_(1)
        return v.sum()

    def same_tensor_twice():
        x = torch.randn(3, requires_grad=True)
        return (x * x).sum()

    for name, build in (
        ("graph after backward()", after_backward),
        ("saved tensor changed in place", stale),
        ("one tensor saved twice (x * x)", same_tensor_twice),
    ):
        y = build()
        try:
            dot = make_dot(y, show_saved=True)
            saved_nodes = dot.source.count("fillcolor=orange")
            theirs = f"drew {saved_nodes} saved-tensor node(s), no state shown"
        except Exception as exc:  # noqa: BLE001 - we report whatever torchviz raises
            theirs = f"{type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
        g = capture(y)
        states = [f"{n.name}.{s.name}={s.state}" for n, s in g.saved_tensors()]
        storages = len({s.storage for _, s in g.saved_tensors() if s.storage is not None})
        ours_text = ", ".join(states) + (f"; {storages} storage(s)" if storages else "")
        lines.append(f"| {name} | {theirs} | {ours_text} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dot-timeout", type=float, default=300.0)
    parser.add_argument("--only", nargs="*", help="names of graphs to run (default: all)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
        f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    print()
    print(
        "| graph | nodes (ours / torchviz) | ours: capture ms | ours: layout+SVG ms | ours: total ms "
        "| torchviz make_dot ms | dot -Tsvg ms | torchviz+dot ms | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, build in GRAPHS.items():
        if args.only and name not in args.only:
            continue
        loss, params = build()
        mine = ours(loss, params, args.repeat)
        theirs = torchviz_time(loss, params, args.dot_timeout)
        total_best, total_med = mine["total"]
        if theirs["make_dot"] is not None and theirs["dot"] is not None:
            them = theirs["make_dot"] + theirs["dot"]
            speed = f"{them / total_med:.0f}x"
            them_text = f"{them:.0f}"
        else:
            them_text, speed = "—", "—"
        fmt = lambda pair: f"{pair[0]:.1f} (med {pair[1]:.1f})"
        md = f"{theirs['make_dot']:.0f}" if theirs["make_dot"] is not None else "—"
        dt = f"{theirs['dot']:.0f}" if theirs["dot"] is not None else "—"
        note = f" ({theirs['note'].rstrip('; ')})" if theirs["note"] else ""
        print(
            f"| {name} | {mine['nodes']} / {theirs.get('dot_nodes', '—')} | {fmt(mine['capture'])} | "
            f"{fmt(mine['render'])} | {fmt(mine['total'])} | {md}{note} | {dt} | {them_text} | {speed} |",
            flush=True,
        )
    print()
    print("Speed-up = (torchviz make_dot + dot) / our median total. Ours draws every node (collapse=False),")
    print("with saved tensors and shapes; both sides start from the same live graph.")
    print()
    print("| situation | torchviz make_dot(show_saved=True) | autogradlab capture |")
    print("|---|---|---|")
    for line in robustness():
        print(line)
    print()
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
