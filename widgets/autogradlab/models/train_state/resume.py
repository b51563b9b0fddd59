"""Exact resume: what a checkpoint must hold for training to continue bit for bit (chapter 06).

>>> [row.exact for row in resume_experiment(total=4, stop=2).rows]
[False, False, False, False, False, True]
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from autogradlab.torch_internals import SCALER_GROWTH_TRACKER_KEY, SCHEDULER_LAST_LR_KEY
from autogradlab.units import format_bytes

RESUME_PARTS = ("model", "optimizer", "scheduler", "scaler", "rng", "data")
_BATCHES_PER_EPOCH = 6


def _resume_run(seed: int) -> dict:
    """A small training run with every piece of state a checkpoint must hold.

    ``seed`` sets the initial weights and the global RNG, as a new process would; the
    data set and the shuffling seed come from the run's configuration and do not change.
    """
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8 * _BATCHES_PER_EPOCH, 4, generator=gen, dtype=torch.float64)
    dataset = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True).sin())
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1)
    ).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    # The loader shuffles with its own generator: the data order then never depends on
    # how many Dropout masks were drawn (without one it draws from the global RNG).
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7)
    )
    return {
        "model": model,
        "optimizer": optimizer,
        "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5),
        "scaler": torch.amp.GradScaler("cpu", init_scale=2.0**4, growth_interval=1),
        "loader": loader,
        # Where the loop is: the epoch, the batches of it already trained on, and the
        # shuffle generator's state when the epoch began (replaying it replays the order).
        "position": {"epoch": 0, "batch": 0, "epoch_start": loader.generator.get_state()},
    }


def _resume_train(run: dict, steps: int, scaler: bool = True) -> None:
    """``steps`` more optimizer steps, continuing from ``run["position"]``."""
    model, optimizer, loader, position = run["model"], run["optimizer"], run["loader"], run["position"]
    while steps > 0:
        if position["batch"] == 0:
            position["epoch_start"] = loader.generator.get_state()
        else:  # resuming inside an epoch: replay its order, skip what was trained on
            loader.generator.set_state(position["epoch_start"])
        for i, (x, y) in enumerate(loader):
            if i < position["batch"]:
                continue
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            if scaler:
                run["scaler"].scale(loss).backward()
                run["scaler"].step(optimizer)
                run["scaler"].update()
            else:
                loss.backward()
                optimizer.step()
            run["scheduler"].step()
            position["batch"], steps = i + 1, steps - 1
            if steps == 0:
                break
        if position["batch"] == len(loader):
            position.update(epoch=position["epoch"] + 1, batch=0)


def _save_parts(run: dict, parts: Iterable[str]) -> bytes:
    """A checkpoint of ``parts`` of ``run``, written with torch.save: it shares no tensor with the run."""
    checkpoint = {}
    for part in parts:
        if part == "rng":
            checkpoint["rng"] = {"cpu": torch.get_rng_state()}
            if torch.cuda.is_available():  # CUDA ops (Dropout on the GPU) draw from these, not the CPU's
                checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        elif part == "data":
            checkpoint["data"] = dict(run["position"])
        else:
            checkpoint[part] = run[part].state_dict()
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    return buffer.getvalue()


def _load_parts(blob: bytes, run: dict, parts: Iterable[str] = RESUME_PARTS) -> None:
    """Restore ``parts`` of the checkpoint into ``run``; ``torch.load`` makes new tensors on every load."""
    checkpoint = torch.load(io.BytesIO(blob), weights_only=True)
    for part, state in checkpoint.items():
        if part not in parts:
            continue
        if part == "rng":
            torch.set_rng_state(state["cpu"])
            if "cuda" in state:
                torch.cuda.set_rng_state_all(state["cuda"])
        elif part == "data":
            run["position"].update(state)
        else:
            run[part].load_state_dict(state)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


@dataclass(frozen=True)
class ResumeRow:
    """One resume: which parts the checkpoint held, and how far the result is from the uninterrupted run."""

    parts: tuple[str, ...]
    exact: bool
    max_diff: float
    scale: float


@dataclass(frozen=True)
class ResumeReport:
    """What :func:`resume_experiment` measured."""

    rows: list[ResumeRow]
    scale: float  # the uninterrupted run's final GradScaler scale
    scaler_changes_nothing: bool  # the same run without GradScaler ends at the same parameters
    checkpoint: bytes  # the full checkpoint, for :func:`describe_checkpoint`

    def table(self) -> str:
        """One line per checkpoint: what it held, bit-exact or not, the largest parameter difference, the scale."""
        width = len(" + ".join(RESUME_PARTS))
        lines = [f"{'checkpoint holds':{width}} | bit-exact | max |Δparameter| | scaler scale"]
        for row in self.rows:
            lines.append(
                f"{' + '.join(row.parts):{width}} | {row.exact!s:9} | {row.max_diff:16.2e} | "
                f"{row.scale:g} (uninterrupted: {self.scale:g})"
            )
        return "\n".join(lines)


def resume_experiment(total: int = 12, stop: int = 8) -> ResumeReport:
    """Train ``total`` steps uninterrupted; then stop after ``stop``, checkpoint, and resume in fresh objects.

    Each resume restores a growing prefix of :data:`RESUME_PARTS` into a run built
    with other initial weights and another global RNG state (as in a new process).
    The global RNG is left as it was.

    >>> report = resume_experiment(total=4, stop=2)
    >>> [row.exact for row in report.rows]
    [False, False, False, False, False, True]
    """
    with torch.random.fork_rng(devices=[]):
        uninterrupted = _resume_run(0)
        _resume_train(uninterrupted, total)
        target = _flat(uninterrupted["model"])
        plain = _resume_run(0)
        _resume_train(plain, total, scaler=False)
        scaler_changes_nothing = torch.equal(_flat(plain["model"]), target)

        run = _resume_run(0)
        _resume_train(run, stop)
        full = _save_parts(run, RESUME_PARTS)
        rows = []
        for n in range(1, len(RESUME_PARTS) + 1):
            parts = RESUME_PARTS[:n]
            fresh = _resume_run(1)
            torch.manual_seed(1234)  # a new process starts from some other RNG state
            _load_parts(full, fresh, parts)
            _resume_train(fresh, total - stop)
            got = _flat(fresh["model"])
            rows.append(
                ResumeRow(
                    parts, torch.equal(got, target), float((got - target).abs().max()), fresh["scaler"].get_scale()
                )
            )
    return ResumeReport(rows, uninterrupted["scaler"].get_scale(), scaler_changes_nothing, full)


def describe_checkpoint(blob: bytes) -> str:
    """What a checkpoint made by the resume experiment holds, part by part, with its size on disk.

    >>> print(describe_checkpoint(resume_experiment(total=2, stop=1).checkpoint).splitlines()[0])
    part      | size     | holds
    """
    checkpoint = torch.load(io.BytesIO(blob), weights_only=True)
    rows = []
    for part, state in checkpoint.items():
        buffer = io.BytesIO()
        torch.save(state, buffer)
        if part == "model":
            holds = ", ".join(f"{k} {tuple(v.shape)}" for k, v in state.items())
        elif part == "optimizer":
            keys = sorted({k for s in state["state"].values() for k in s})
            holds = f"{', '.join(keys)} for each of {len(state['state'])} parameters; lr, betas, ... of {len(state['param_groups'])} group"
        elif part == "scheduler":
            holds = f"last_epoch={state['last_epoch']}, last lr={state[SCHEDULER_LAST_LR_KEY][0]:g}"
        elif part == "scaler":
            holds = f"scale={state['scale']:g}, steps since the last growth={state[SCALER_GROWTH_TRACKER_KEY]}"
        elif part == "rng":
            cuda = f"{len(state['cuda'])} CUDA generator(s)" if "cuda" in state else "no CUDA generator on this machine"
            holds = f"CPU generator ({format_bytes(state['cpu'].numel())}); {cuda}"
        else:
            holds = (
                f"epoch {state['epoch']}, {state['batch']} of {_BATCHES_PER_EPOCH} batches done, "
                f"shuffle generator state at the epoch's start"
            )
        rows.append(f"{part:9} | {format_bytes(buffer.getbuffer().nbytes):8} | {holds}")
    return "\n".join([f"{'part':9} | {'size':8} | holds"] + rows)
