"""The six pieces of state a training step moves, as snapshots you can compare (chapter 06's model).

A training step changes: the forward **graph**, the ``.grad`` buffers (**grad**), the
parameter values (**param**), the **optimizer** state, the module **mode**, and the
**rng** state. :func:`snapshot` records all six; :func:`describe` turns a snapshot
into table cells, marking the ones that differ from an earlier snapshot.

>>> import torch
>>> model = torch.nn.Linear(2, 1)
>>> before = snapshot(model)
>>> model(torch.ones(1, 2)).sum().backward()
>>> changed_states(before, snapshot(model))
['grad']
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import torch

from autogradlab.units import format_bytes

STATES = ("graph", "grad", "param", "optimizer", "mode", "rng")
STATE_TITLES = {
    "graph": "forward graph",
    "grad": ".grad",
    "param": "parameter value",
    "optimizer": "optimizer state",
    "mode": "module mode",
    "rng": "RNG state",
}


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class GraphStats:
    """What the autograd graphs behind some tensors hold on to.

    ``nodes``: backward nodes reachable from the tensors; ``saved_bytes``: bytes of
    saved tensors still held (each storage counted once, parameters excluded);
    ``freed``: nodes whose saved tensors were released by a backward pass;
    ``stale``: nodes holding a saved tensor that was modified in place after it was
    saved (an ``optimizer.step()`` after ``backward(retain_graph=True)``): backward
    through them raises.
    """

    nodes: int
    saved_bytes: int
    freed: int
    stale: int = 0

    def __str__(self) -> str:
        if self.nodes == 0:
            return "none"
        status = "freed" if self.freed and not self.saved_bytes else "alive"
        text = f"{status}: {self.nodes} nodes, {format_bytes(self.saved_bytes)} saved"
        return text + (f", {self.stale} stale" if self.stale else "")


def _saved_tensors(node) -> tuple[list[torch.Tensor], bool, bool]:
    """The tensors a backward node saved, whether some were freed, and whether some are stale."""
    tensors, freed, stale = [], False, False
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError as error:
            # Reading a saved tensor raises the error backward would raise: freed by an
            # earlier backward, or modified in place since it was saved (version check).
            if "modified by an inplace operation" in str(error):
                stale = True
            else:
                freed = True
            continue
        values = value if isinstance(value, (list, tuple)) else (value,)
        tensors.extend(v for v in values if isinstance(v, torch.Tensor))
    return tensors, freed, stale


def graph_stats(tensors: Iterable, parameters: Iterable[torch.Tensor] = ()) -> GraphStats:
    """Count the backward nodes and saved-tensor bytes reachable from ``tensors``.

    Non-tensors and tensors without ``grad_fn`` are ignored, so a list of logged
    values can be passed as is. The walk is iterative (deep graphs are fine).

    >>> x = torch.ones(3, requires_grad=True)
    >>> str(graph_stats([(x * x).sum()]))
    'alive: 3 nodes, 12 B saved'
    """
    # Parameters are saved by most layers but are not memory that a graph adds.
    skip = {p.untyped_storage().data_ptr() for p in parameters}
    stack = [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen, storages = set(), set()
    nodes = saved = freed = stale = 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:  # id() only to deduplicate, never shown
            continue
        seen.add(id(node))
        nodes += 1
        tensors_saved, was_freed, was_stale = _saved_tensors(node)
        freed += was_freed
        stale += was_stale
        for t in tensors_saved:
            key = t.untyped_storage().data_ptr()
            if key in skip or key in storages or t.untyped_storage().nbytes() == 0:
                continue
            storages.add(key)
            saved += t.untyped_storage().nbytes()
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return GraphStats(nodes, saved, freed, stale)


# --------------------------------------------------------------------------- snapshots


def rng_fingerprint() -> str:
    """Eight hex digits identifying the CPU generator's state (equal states, equal fingerprints).

    >>> _ = torch.manual_seed(0); a = rng_fingerprint()
    >>> _ = torch.manual_seed(0); a == rng_fingerprint()
    True
    """
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:8]


def module_mode(model: torch.nn.Module) -> str:
    """``'train'``, ``'eval'``, or ``'mixed: k of n modules in train'``."""
    flags = [m.training for m in model.modules()]
    if all(flags):
        return "train"
    if not any(flags):
        return "eval"
    return f"mixed: {sum(flags)} of {len(flags)} modules in train"


@dataclass
class Snapshot:
    """Copies of the six pieces of state at one moment (small models only: parameters are cloned)."""

    graph: GraphStats
    grads: dict[str, torch.Tensor | None]
    params: dict[str, torch.Tensor]
    optimizer: dict[str, dict[str, torch.Tensor] | None]  # None: parameter not in the optimizer
    mode: str
    rng: str
    trainable: dict[str, bool] = field(default_factory=dict)


def _optimizer_state(optimizer, params: Mapping[str, torch.Tensor]) -> dict[str, dict | None]:
    covered = {id(p) for group in optimizer.param_groups for p in group["params"]} if optimizer else set()
    out = {}
    for name, p in params.items():
        if id(p) not in covered:
            out[name] = None
            continue
        state = optimizer.state.get(p, {})
        out[name] = {
            k: (v.detach().clone() if isinstance(v, torch.Tensor) else torch.tensor(v))
            for k, v in state.items()
            if isinstance(v, (torch.Tensor, int, float))  # e.g. SGD keeps momentum_buffer=None without momentum
        }
    return out


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, graph_roots: Iterable = ()) -> Snapshot:
    """Record graph, grads, parameters, optimizer state, mode and RNG of a (small) model.

    ``graph_roots``: tensors whose graphs count as "the forward graph" (e.g. ``[loss]``).

    >>> s = snapshot(torch.nn.Linear(2, 1))
    >>> (s.mode, s.grads["weight"], str(s.graph))
    ('train', None, 'none')
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"snapshot needs a torch.nn.Module, got {type(model).__name__}")
    named = dict(model.named_parameters())
    return Snapshot(
        graph=graph_stats(list(graph_roots), named.values()),
        grads={n: (None if p.grad is None else p.grad.detach().clone()) for n, p in named.items()},
        params={n: p.detach().clone() for n, p in named.items()},
        optimizer=_optimizer_state(optimizer, named),
        mode=module_mode(model),
        rng=rng_fingerprint(),
        trainable={n: p.requires_grad for n, p in named.items()},
    )


# --------------------------------------------------------------------------- comparing


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _same_state(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def _changed(state: str, item: str, before: Snapshot, after: Snapshot) -> bool:
    if state == "graph":
        return before.graph != after.graph
    if state == "mode":
        return before.mode != after.mode
    if state == "rng":
        return before.rng != after.rng
    if item not in getattr(before, _PER_PARAM[state]):
        return True
    if state == "grad":
        return not _same(before.grads[item], after.grads[item])
    if state == "param":
        return not _same(before.params[item], after.params[item])
    return not _same_state(before.optimizer[item], after.optimizer[item])


_PER_PARAM = {"grad": "grads", "param": "params", "optimizer": "optimizer"}


def changed_states(before: Snapshot, after: Snapshot) -> list[str]:
    """Which of the six states differ between two snapshots, in the order of :data:`STATES`."""
    return [cell_state for cell_state in STATES if any(c.changed for c in describe(after, before) if c.state == cell_state)]


@dataclass(frozen=True)
class Cell:
    """One cell of the state table: ``item`` is a parameter name, or '' for a whole-model state."""

    state: str
    item: str
    text: str
    changed: bool


def _norm(t: torch.Tensor) -> float:
    return float(t.detach().double().norm())


def _optimizer_text(state: dict | None) -> str:
    if state is None:
        return "not in optimizer"
    if not state:
        return "empty"
    parts = []
    for key, value in state.items():
        if value.numel() == 1 and key == "step":
            parts.append(f"step {int(value.item())}")
        else:
            parts.append(f"‖{key}‖ {_norm(value):.3g}")
    return " · ".join(parts)


def describe(after: Snapshot, before: Snapshot | None = None) -> list[Cell]:
    """Table cells for a snapshot; ``changed`` marks cells that differ from ``before``.

    >>> m = torch.nn.Linear(2, 1)
    >>> [c.text for c in describe(snapshot(m)) if c.state == "mode"]
    ['train']
    """
    cells = [
        Cell("graph", "", str(after.graph), False),
        Cell("mode", "", after.mode, False),
        Cell("rng", "", after.rng, False),
    ]
    for name, value in after.params.items():
        grad = after.grads[name]
        grad_text = "None" if grad is None else f"‖g‖ {_norm(grad):.4g}"
        param_text = f"‖p‖ {_norm(value):.5g}"
        if before is not None and name in before.params and before.params[name].shape == value.shape:
            delta = _norm(value - before.params[name])
            if delta:
                param_text += f" (Δ {delta:.2g})"
        if not after.trainable.get(name, True):
            param_text += " · frozen"
        cells += [
            Cell("grad", name, grad_text, False),
            Cell("param", name, param_text, False),
            Cell("optimizer", name, _optimizer_text(after.optimizer[name]), False),
        ]
    if before is None:
        return cells
    return [Cell(c.state, c.item, c.text, _changed(c.state, c.item, before, after)) for c in cells]


# --------------------------------------------------------------------------- stepping a train_step


def train_step(model, batch, optimizer, loss_fn, device="cpu", max_norm=0.5):
    """The robust training step of chapter 06 (the inspector's default program).

    >>> train_step(**small_setup()).grad_fn is None
    True
    """
    model.train()
    inputs, targets = batch[0].to(device), batch[1].to(device)
    optimizer.zero_grad(set_to_none=True)
    outputs = model(inputs)
    loss = loss_fn(outputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach()


def small_setup(seed: int = 0) -> dict:
    """A small MLP with Dropout, an Adam optimizer that has taken one step, a batch, and MSE.

    The model is left in eval mode (as after a validation pass) and its ``.grad``
    buffers are full, so every line of :func:`train_step` has something to change.

    >>> sorted(small_setup())
    ['batch', 'loss_fn', 'model', 'optimizer']
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential()
    model.add_module("hidden", torch.nn.Linear(4, 8))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("drop", torch.nn.Dropout(0.5))
    model.add_module("out", torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    batch = (torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen))
    loss_fn(model(batch[0]), batch[1]).backward()
    optimizer.step()
    model.eval()
    return {"model": model, "batch": batch, "optimizer": optimizer, "loss_fn": loss_fn}


def _graph_roots(values: Iterable) -> list[torch.Tensor]:
    roots = []
    for value in values:
        items = value if isinstance(value, (list, tuple)) else (value,)
        roots.extend(v for v in items if isinstance(v, torch.Tensor))
    return roots


@dataclass(frozen=True)
class LineTrace:
    """One executed line: which states it changed, and the error it raised (or None)."""

    source: str
    changed: list[str]
    error: str | None


class StepSession:
    """A ``train_step`` run line by line on a fresh setup, with a snapshot after every line.

    ``step``: a function whose arguments are filled from ``setup()``'s dict (by name);
    ``setup``: returns at least ``model`` (and usually ``optimizer``, ``batch``, ``loss_fn``).

    >>> session = StepSession()
    >>> session.next().line.source
    'model.train()'
    >>> session.changed
    ['mode']
    """

    def __init__(self, step=None, setup=None):
        from autogradlab.models.stepper import Stepper

        self._stepper_cls = Stepper
        self.step_fn = step or train_step
        self.setup = setup or small_setup
        self.reset()

    def reset(self) -> None:
        """Rebuild the setup (same seed, same state) and go back before the first line."""
        import inspect

        objects = self.setup()
        if "model" not in objects:
            raise ValueError("setup() must return a dict with at least a 'model' entry")
        self.model, self.optimizer = objects["model"], objects.get("optimizer")
        wanted = inspect.signature(self.step_fn).parameters
        arguments = {k: v for k, v in objects.items() if k in wanted}
        self.stepper = self._stepper_cls(self.step_fn, arguments)
        self.before = self.current = self._snapshot()
        self.last = None
        self.history: list[LineTrace] = []

    def _snapshot(self) -> Snapshot:
        return snapshot(self.model, self.optimizer, _graph_roots(self.stepper.locals.values()))

    @property
    def lines(self):
        return self.stepper.lines

    @property
    def done(self) -> bool:
        return self.stepper.done

    @property
    def error(self) -> str | None:
        return self.stepper.error

    @property
    def changed(self) -> list[str]:
        """States changed by the last line run."""
        return self.history[-1].changed if self.history else []

    def next(self):
        """Run the next line and snapshot the state after it."""
        result = self.stepper.step()
        self.before, self.current = self.current, self._snapshot()
        self.last = result
        self.history.append(LineTrace(result.line.source, changed_states(self.before, self.current), result.error))
        return result

    def run(self) -> list[LineTrace]:
        """Run the remaining lines; returns the trace of every line run so far."""
        while not self.done:
            self.next()
        return self.history

    def cells(self) -> list[Cell]:
        """The state table after the last line, marking what that line changed."""
        return describe(self.current, self.before if self.history else None)


def trace_table(history: list[LineTrace], width: int = 44) -> str:
    """A plain-text table: one row per executed line (cut to ``width`` characters), a ✓ under each state it changed."""

    def short(source: str) -> str:
        first = source.splitlines()[0]
        return first if len(first) <= width else first[: width - 1] + "…"

    column = max([len(short(t.source)) for t in history] + [4])
    head = f"{'line':<{column}} | " + " | ".join(STATES)
    rows = [head, "-" * len(head)]
    for t in history:
        marks = " | ".join(f"{'✓' if s in t.changed else '':^{len(s)}}" for s in STATES)
        rows.append(f"{short(t.source):<{column}} | {marks}")
        if t.error:
            rows.append(f"  ✗ {t.error}")
    return "\n".join(rows)


# --------------------------------------------------------------------------- exact resume

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
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
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
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


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
            rows.append(ResumeRow(parts, torch.equal(got, target), float((got - target).abs().max()),
                                  fresh["scaler"].get_scale()))
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
            holds = f"last_epoch={state['last_epoch']}, last lr={state['_last_lr'][0]:g}"
        elif part == "scaler":
            holds = f"scale={state['scale']:g}, steps since the last growth={state['_growth_tracker']}"
        elif part == "rng":
            cuda = f"{len(state['cuda'])} CUDA generator(s)" if "cuda" in state else "no CUDA generator on this machine"
            holds = f"CPU generator ({format_bytes(state['cpu'].numel())}); {cuda}"
        else:
            holds = (f"epoch {state['epoch']}, {state['batch']} of {_BATCHES_PER_EPOCH} batches done, "
                     f"shuffle generator state at the epoch's start")
        rows.append(f"{part:9} | {format_bytes(buffer.getbuffer().nbytes):8} | {holds}")
    return "\n".join([f"{'part':9} | {'size':8} | holds"] + rows)
