"""Data-parallel training as gradient accumulation across processes: a real DDP run on CPU (chapter 07).

:func:`run_ddp_demo` starts two worker processes (``python -m autogradlab.models.ddp_demo
--rank R ...``) that join a ``torch.distributed`` group with the gloo backend and run
``DistributedDataParallel`` on a small token model, in float64. Each worker saves the
gradients it ends up with; the calling process computes the single-process
references itself and compares. Ports and timings never appear in the result, only
the comparisons, so a notebook can print them deterministically.

If the workers cannot start, fail, or do not finish within ``timeout_s``, they are
killed and the result says why (``ok=False``): nothing hangs.

>>> result = run_ddp_demo()                      # doctest: +SKIP
>>> result.ok, result.comparisons["ddp_vs_full_batch"] < 1e-12   # doctest: +SKIP
(True, True)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from autogradlab.models.token_accumulation import (
    TokenBatch,
    full_batch_gradient,
    token_batch,
    token_losses,
    token_model,
)

WORLD_SIZE = 2
# The two data sets: equal lengths (plain mean is exact) and a wide length spread (it is not).
EQUAL = dict(n_seqs=8, spread=0.0, mean_len=6, seed=1)
UNEQUAL = dict(n_seqs=8, spread=1.0, mean_len=6, seed=2)
LAUNCHER = (sys.executable, "-m", "autogradlab.models.ddp_demo")


@dataclass
class DDPResult:
    """``ok``: the run finished; ``message``: one line saying what happened; ``comparisons``: measured numbers."""

    ok: bool
    message: str
    comparisons: dict[str, float] = field(default_factory=dict)
    tokens_per_rank: list[int] = field(default_factory=list)


# --------------------------------------------------------------------------- worker side


def _shard(batch: TokenBatch, rank: int, world: int) -> TokenBatch:
    size = len(batch) // world
    return batch.slice(rank * size, (rank + 1) * size)


def _grad(model) -> torch.Tensor:
    return parameters_to_vector(p.grad for p in model.parameters())


def _count_allreduces(model) -> list:
    """Make DDP record every gradient all-reduce (one per bucket) in the returned list."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    calls = []

    def hook(state, bucket):
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    return calls


def worker(rank: int, world: int, init_method: str, out: Path) -> None:
    """One DDP process: join the gloo group, run the three experiments, save the gradients to ``out``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=30))
    results = {}

    # 1. DDP averages the ranks' gradients of their local mean loss.
    model = DDP(token_model())
    shard = _shard(token_batch(**EQUAL), rank, world)
    (token_losses(model, shard).sum() / shard.tokens).backward()
    results["ddp"] = _grad(model)

    # 2. Accumulation under DDP: no_sync() on every micro-batch but the last, so gradients are all-reduced once.
    half = len(shard) // 2
    micro = [shard.slice(0, half), shard.slice(half, len(shard))]
    for use_no_sync in (True, False):
        model = DDP(token_model())
        calls = _count_allreduces(model)
        with model.no_sync() if use_no_sync else contextlib.nullcontext():
            (token_losses(model, micro[0]).sum() / micro[0].tokens / 2).backward()
        if use_no_sync:
            results["no_sync_first"] = _grad(model)
        (token_losses(model, micro[1]).sum() / micro[1].tokens / 2).backward()
        results["no_sync_final" if use_no_sync else "synced_final"] = _grad(model)
        results["allreduces_no_sync" if use_no_sync else "allreduces_synced"] = torch.tensor(len(calls))

    # 3. Token mean with different token counts per rank.
    shard = _shard(token_batch(**UNEQUAL), rank, world)
    model = DDP(token_model())
    (token_losses(model, shard).sum() / shard.tokens).backward()  # each rank's own token mean
    results["local_token_mean"] = _grad(model)
    count = torch.tensor([shard.tokens], dtype=torch.float64)
    dist.all_reduce(count)  # the global token count, known to every rank
    model = DDP(token_model())
    # DDP divides the summed gradient by world size, so multiply it back in.
    (token_losses(model, shard).sum() * world / count).backward()
    results["global_token_mean"] = _grad(model)
    results["tokens"] = torch.tensor(shard.tokens)

    partial = out / f"rank{rank}.pt.partial"
    torch.save(results, partial)
    partial.rename(out / f"rank{rank}.pt")  # the launcher never reads a half-written file
    dist.barrier()  # nobody tears down gloo while a peer still talks to it
    dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one worker of the chapter 07 DDP demo")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, default=WORLD_SIZE)
    parser.add_argument("--init", required=True, help="init_method, e.g. file:///tmp/x/init")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    worker(args.rank, args.world_size, args.init, args.out)
    # gloo's C++ threads can still hold Python objects during interpreter teardown and abort it
    # (SIGABRT, "terminate called without an active exception"); the results are saved, so skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# --------------------------------------------------------------------------- launcher side


def _environment() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # gloo picks a network interface from the host name, which can fail in containers; loopback always works.
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _launch(workdir: Path, timeout_s: float, launcher: Sequence[str]) -> str | None:
    """Start the workers and wait for them; return None on success, else a one-line reason."""
    init = (workdir / "init").as_uri()
    env = _environment()
    procs, logs = [], []
    try:
        for rank in range(WORLD_SIZE):
            log = workdir / f"rank{rank}.log"
            logs.append(log)
            with open(log, "w") as handle:
                procs.append(
                    subprocess.Popen(
                        [
                            *launcher,
                            "--rank",
                            str(rank),
                            "--world-size",
                            str(WORLD_SIZE),
                            "--init",
                            init,
                            "--out",
                            str(workdir),
                        ],
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                    )
                )
    except OSError as exc:
        _stop(procs)
        return f"could not start the worker processes ({type(exc).__name__}: {exc})"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                detail = _last_line(logs[rank])
                return f"worker {rank} exited with code {code}" + (f": {detail}" if detail else "")
            if all(c == 0 for c in codes):
                return None
            if time.monotonic() > deadline:
                return f"the workers did not finish within {timeout_s:g} s and were stopped"
            time.sleep(0.05)
    finally:
        _stop(procs)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _flat(grad_model) -> torch.Tensor:
    return parameters_to_vector(p.grad for p in grad_model.parameters())


def compare(ranks: list[dict]) -> dict[str, float]:
    """The measured comparisons between the workers' gradients and single-process references."""
    full_equal = full_batch_gradient(token_model(), token_batch(**EQUAL), "mean")
    full_unequal = full_batch_gradient(token_model(), token_batch(**UNEQUAL), "mean")
    r0, r1 = ranks
    return {
        "ddp_vs_full_batch": _max_abs(r0["ddp"], full_equal),
        "ddp_ranks_differ": _max_abs(r0["ddp"], r1["ddp"]),
        "no_sync_ranks_differ_before_sync": _max_abs(r0["no_sync_first"], r1["no_sync_first"]),
        "no_sync_vs_full_batch": _max_abs(r0["no_sync_final"], full_equal),
        "synced_vs_full_batch": _max_abs(r0["synced_final"], full_equal),
        "allreduces_with_no_sync": float(r0["allreduces_no_sync"]),
        "allreduces_without_no_sync": float(r0["allreduces_synced"]),
        "local_token_mean_rel_error": _relative(r0["local_token_mean"], full_unequal),
        "global_token_mean_rel_error": _relative(r0["global_token_mean"], full_unequal),
    }


def run_ddp_demo(timeout_s: float = 60.0, launcher: Sequence[str] = LAUNCHER) -> DDPResult:
    """Run the 2-process gloo DDP demo and compare its gradients with single-process ones.

    ``launcher``: the command that starts one worker (the worker's arguments are appended).
    Never raises for a failed run: the result's ``ok`` and ``message`` say what happened.
    """
    workdir = Path(tempfile.mkdtemp(prefix="autogradlab-ddp-"))
    try:
        problem = _launch(workdir, timeout_s, launcher)
        if problem is None:
            try:
                ranks = [torch.load(workdir / f"rank{r}.pt") for r in range(WORLD_SIZE)]
            except (OSError, RuntimeError) as exc:
                problem = f"the workers finished but their results could not be read ({exc})"
        if problem is not None:
            return DDPResult(False, f"DDP demo not run: {problem}. The rest of the chapter does not depend on it.")
        tokens = [int(r["tokens"]) for r in ranks]
        return DDPResult(True, f"DDP demo ran on {WORLD_SIZE} CPU processes (gloo)", compare(ranks), tokens)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
