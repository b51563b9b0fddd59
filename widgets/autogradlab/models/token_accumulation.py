"""Gradient accumulation experiments on variable-length token batches (chapter 07's model).

A batch of N sequences is split into K micro-batches. Each micro-batch's loss is
backpropagated and the gradients add up in ``.grad``. Whether the sum equals the
gradient of the full batch depends on how each micro-batch loss is reduced:

- ``"sum"``: sum of token losses, no division. Equals the full-batch *sum* exactly.
- ``"mean"``: the micro-batch's own token mean, divided by K. Equals the full-batch
  token mean only when every micro-batch has the same number of loss tokens.
- ``"mean (no ÷K)"``: the micro-batch's token mean, *not* divided by K: K× too large.
- ``"token-mean"``: sum of token losses divided by the token count of the whole
  window (counted before the loop). Equals the full-batch token mean exactly.

>>> batch = token_batch(n_seqs=8, spread=0.0)
>>> r = accumulation_error(batch, accum_steps=4, reduction="mean (no ÷K)")
>>> round(r.lr_factor, 6)
4.0
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from autogradlab.i18n import N_

# the reductions' names are also their labels, shown through _() (a translation may add words to a name)
REDUCTIONS = (N_("sum"), N_("mean"), N_("mean (no ÷K)"), N_("token-mean"))
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class TokenBatch:
    """Sequences of token features and targets; ``mask`` marks the tokens the loss counts (the response)."""

    features: torch.Tensor  # (N, T, dim)
    targets: torch.Tensor  # (N, T) class indices
    mask: torch.Tensor  # (N, T) bool

    def __len__(self) -> int:
        return self.features.shape[0]

    def slice(self, start: int, stop: int) -> TokenBatch:
        return TokenBatch(self.features[start:stop], self.targets[start:stop], self.mask[start:stop])

    @property
    def tokens(self) -> int:
        """Number of loss tokens."""
        return int(self.mask.sum())


def token_batch(
    n_seqs: int = 48, spread: float = 0.5, mean_len: int = 16, dim: int = 8, vocab: int = 5, seed: int = 0
) -> TokenBatch:
    """A random batch whose response lengths vary uniformly in mean_len·(1 ± spread).

    ``spread = 0``: every sequence has ``mean_len`` loss tokens; ``spread = 1``:
    lengths from 1 to 2·mean_len.

    >>> token_batch(n_seqs=4, spread=0.0, mean_len=3).mask.sum(dim=1).tolist()
    [3, 3, 3, 3]
    """
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"spread must be between 0 and 1, got {spread}")
    if n_seqs < 1 or mean_len < 1:
        raise ValueError(f"need n_seqs >= 1 and mean_len >= 1, got {n_seqs}, {mean_len}")
    gen = torch.Generator().manual_seed(seed)
    max_len = 2 * mean_len
    u = torch.rand(n_seqs, generator=gen, dtype=torch.float64) * 2 - 1
    lengths = (mean_len * (1 + spread * u)).round().clamp(1, max_len).long()
    mask = torch.arange(max_len)[None, :] < lengths[:, None]
    features = torch.randn(n_seqs, max_len, dim, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, vocab, (n_seqs, max_len), generator=gen)
    return TokenBatch(features, targets, mask)


def token_model(dim: int = 8, vocab: int = 5, seed: int = 0) -> torch.nn.Module:
    """A small per-token classifier (float64): Linear → tanh → Linear."""
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5)
    return model


def token_losses(model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
    """Per-token cross-entropy, zero where ``mask`` is False; shape (N, T)."""
    dtype = next(model.parameters()).dtype
    logits = model(batch.features.to(dtype))
    losses = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none").view_as(batch.targets)
    return losses * batch.mask.to(losses.dtype)


def _reduce(total: torch.Tensor, tokens: int, reduction: str, accum_steps: int, window_tokens: int) -> torch.Tensor:
    """A micro-batch's token-loss sum ``total`` (over ``tokens`` loss tokens) reduced as ``reduction`` says."""
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / tokens / accum_steps
    if reduction == "mean (no ÷K)":
        return total / tokens
    if reduction == "token-mean":
        return total / window_tokens
    raise ValueError(f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")


def micro_batch_loss(model, micro: TokenBatch, reduction: str, accum_steps: int, window_tokens: int) -> torch.Tensor:
    """The scalar a micro-batch backpropagates under ``reduction`` (see the module docstring)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")
    return _reduce(token_losses(model, micro).sum(), micro.tokens, reduction, accum_steps, window_tokens)


def token_weights(batch: TokenBatch, accum_steps: int, reduction: str) -> list[float]:
    """The weight of one loss token of each micro-batch in the accumulated loss, in units of the exact 1/N.

    Measured with autograd: the derivative of the sum of the micro-batch losses with
    respect to a token's loss, times the window's token count N. All 1.0: the
    accumulated gradient is the gradient of the window's token mean. (Within a
    micro-batch every counted token gets the same weight, so one number per micro-batch.)

    >>> token_weights(token_batch(n_seqs=4, spread=0.0, mean_len=3), 2, "mean")
    [1.0, 1.0]
    """
    if accum_steps < 1 or len(batch) % accum_steps:
        raise ValueError(f"accum_steps={accum_steps} must divide the batch of {len(batch)} sequences")
    per_token = torch.ones(batch.mask.shape, dtype=torch.float64, requires_grad=True)
    size = len(batch) // accum_steps
    total = sum(
        _reduce(
            per_token[k * size : (k + 1) * size][batch.mask[k * size : (k + 1) * size]].sum(),
            batch.slice(k * size, (k + 1) * size).tokens,
            reduction,
            accum_steps,
            batch.tokens,
        )
        for k in range(accum_steps)
    )
    (grad,) = torch.autograd.grad(total, per_token)
    return [
        round(float(grad[k * size : (k + 1) * size][batch.mask[k * size : (k + 1) * size]].mean()) * batch.tokens, 12)
        for k in range(accum_steps)
    ]


def _flat_grad(model) -> torch.Tensor:
    return parameters_to_vector(p.grad for p in model.parameters()).double()


def accumulated_gradient(model, batch: TokenBatch, accum_steps: int, reduction: str) -> torch.Tensor:
    """Split ``batch`` into ``accum_steps`` micro-batches, backpropagate each, return the summed ``.grad`` (flat, float64).

    The model's dtype is the dtype of the forward pass and of the ``.grad`` buffers.
    """
    if accum_steps < 1 or len(batch) % accum_steps:
        raise ValueError(f"accum_steps={accum_steps} must divide the batch of {len(batch)} sequences")
    window_tokens = batch.tokens  # counted before the loop: the exact token mean needs it up front
    size = len(batch) // accum_steps
    model.zero_grad(set_to_none=True)
    for k in range(accum_steps):
        micro = batch.slice(k * size, (k + 1) * size)
        micro_batch_loss(model, micro, reduction, accum_steps, window_tokens).backward()
    return _flat_grad(model)


def full_batch_gradient(model, batch: TokenBatch, reduction: str) -> torch.Tensor:
    """The gradient of the whole batch in one pass: token sum for ``"sum"``, else the token mean."""
    model.zero_grad(set_to_none=True)
    total = token_losses(model, batch).sum()
    (total if reduction == "sum" else total / batch.tokens).backward()
    return _flat_grad(model)


@dataclass(frozen=True)
class AccumulationResult:
    """Accumulated vs full-batch gradient: relative error and the effective learning-rate factor."""

    accum_steps: int
    reduction: str
    dtype: str
    relative_error: float  # ‖g_acc − g_full‖ / ‖g_full‖
    lr_factor: float  # c in g_acc ≈ c · g_full (least squares): a plain step with g_acc is a step with lr·c


def accumulation_error(
    batch: TokenBatch,
    accum_steps: int,
    reduction: str,
    dtype: str = "float64",
    model_seed: int = 0,
    reference: torch.Tensor | None = None,
) -> AccumulationResult:
    """Compare the accumulated gradient in ``dtype`` with the float64 full-batch gradient.

    ``reference``: that full-batch gradient, if already computed (:func:`sweep` reuses it).

    >>> r = accumulation_error(token_batch(n_seqs=8), accum_steps=4, reduction="token-mean")
    >>> r.relative_error < 1e-12
    True
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if reference is None:
        reference = full_batch_gradient(
            token_model(batch.features.shape[-1], _vocab(batch), model_seed), batch, reduction
        )
    model = token_model(batch.features.shape[-1], _vocab(batch), model_seed).to(DTYPES[dtype])
    got = accumulated_gradient(model, batch, accum_steps, reduction)
    error = float((got - reference).norm() / reference.norm())
    factor = float((got @ reference) / (reference @ reference))
    return AccumulationResult(accum_steps, reduction, dtype, error, factor)


def _vocab(batch: TokenBatch) -> int:
    return max(5, int(batch.targets.max()) + 1)


def valid_accum_steps(n_seqs: int, largest: int = 16) -> list[int]:
    """The K ≤ ``largest`` that split ``n_seqs`` sequences into equal micro-batches.

    >>> valid_accum_steps(48)
    [1, 2, 3, 4, 6, 8, 12, 16]
    """
    return [k for k in range(1, min(largest, n_seqs) + 1) if n_seqs % k == 0]


def sweep(
    reduction: str, spread: float, dtype: str = "float64", n_seqs: int = 48, seed: int = 0
) -> list[AccumulationResult]:
    """:func:`accumulation_error` for every valid K on one batch (what AccumulationLab plots)."""
    batch = token_batch(n_seqs=n_seqs, spread=spread, seed=seed)
    reference = full_batch_gradient(token_model(batch.features.shape[-1], _vocab(batch)), batch, reduction)
    return [accumulation_error(batch, k, reduction, dtype, reference=reference) for k in valid_accum_steps(n_seqs)]


@functools.lru_cache(maxsize=128)
def cached_sweep(
    reduction: str, spread: float, dtype: str = "float64", n_seqs: int = 48
) -> tuple[AccumulationResult, ...]:
    """:func:`sweep`, remembered per setting: it is deterministic, and a lab redraws the same sweep for every K.

    The controls bound the settings (4 reductions × 5 spreads × 3 dtypes per batch size), so 128 entries
    keep them all. Returns a tuple, so callers cannot change the shared result.
    """
    return tuple(sweep(reduction, spread, dtype, n_seqs=n_seqs))


def micro_batch_tokens(batch: TokenBatch, accum_steps: int) -> list[int]:
    """Loss tokens in each of the ``accum_steps`` micro-batches (unequal counts are what breaks the plain mean).

    >>> micro_batch_tokens(token_batch(n_seqs=4, spread=0.0, mean_len=3), 2)
    [6, 6]
    """
    if accum_steps < 1 or len(batch) % accum_steps:
        raise ValueError(f"accum_steps={accum_steps} must divide the batch of {len(batch)} sequences")
    size = len(batch) // accum_steps
    return [batch.slice(k * size, (k + 1) * size).tokens for k in range(accum_steps)]


# --------------------------------------------------------------------------- uneven windows (chapter 07's exercises)


def prompt_response_batch(
    gen: torch.Generator, n_seqs: int, length: int, counted: bool = True, dim: int = 6, vocab: int = 5
):
    """A micro-batch whose mask is not a prefix: prompt (not counted), response (counted), then padding.

    ``counted=False``: no token counts (prompts only, or sequences cut before their response).
    """
    features = torch.randn(n_seqs, length, dim, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, vocab, (n_seqs, length), generator=gen)
    positions = torch.arange(length)[None, :]
    prompt = torch.randint(0, max(1, length // 3), (n_seqs, 1), generator=gen)
    response = torch.randint(1, length + 1, (n_seqs, 1), generator=gen)
    mask = (positions >= prompt) & (positions < prompt + response) & counted
    return TokenBatch(features, targets, mask)


# (B, T) per micro-batch; a third entry False marks a micro-batch with no counted token
UNEVEN_WINDOWS = (
    ((3, 7), (2, 11), (4, 5)),
    ((2, 9), (3, 4, False), (1, 12), (2, 6)),
    ((5, 8),),
)


def uneven_window(index: int) -> list[TokenBatch]:
    """Window ``index`` of :data:`UNEVEN_WINDOWS`: micro-batches of different shapes and token counts.

    >>> [m.tokens > 0 for m in uneven_window(1)]
    [True, False, True, True]
    """
    gen = torch.Generator().manual_seed(500 + index)
    return [prompt_response_batch(gen, *spec) for spec in UNEVEN_WINDOWS[index]]


# Worlds of ranks × micro-batches: RANK_WINDOWS[w][r][k] = (B, T) of rank r's micro-batch k, a third entry
# False for no counted token. Every rank has the same number of micro-batches (DDP syncs on the last one).
RANK_WINDOWS = (
    (((3, 7), (2, 5), (1, 4)), ((2, 6), (1, 9), (3, 3))),
    (((2, 8), (3, 4, False)), ((1, 7), (2, 6)), ((2, 4, False), (1, 5, False))),
)


def rank_windows(index: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """World ``index`` of :data:`RANK_WINDOWS`: per rank, per micro-batch, ``(token_losses, mask)`` in float64.

    The losses are stand-ins for per-token cross-entropies (positive); every counted micro-batch has padding.

    >>> [[int(mask.sum()) > 0 for _, mask in rank] for rank in rank_windows(1)]
    [[True, False], [True, True], [False, False]]
    """
    gen = torch.Generator().manual_seed(700 + index)
    world = []
    for rank in RANK_WINDOWS[index]:
        window = []
        for b, t, *counted in rank:
            losses = torch.rand(b, t, generator=gen, dtype=torch.float64) * 3
            lengths = torch.randint(1, t + 1, (b,), generator=gen)
            lengths[0] = max(1, t - 1)
            mask = (torch.arange(t)[None, :] < lengths[:, None]) & (counted or [True])[0]
            window.append((losses, mask))
        world.append(window)
    return world


class RankWorld:
    """Ranks run as threads; ``all_reduce`` sums a tensor over them in place, as ``torch.distributed.all_reduce`` does.

    The i-th all_reduce of every rank is one collective. A rank that finishes without joining
    one would hang a real run; here the ranks waiting for it are released with an error.
    Chapter 07's checker runs a learner's per-rank function in one, on :func:`rank_windows`.

    >>> def step(window, world_size, all_reduce):
    ...     total = torch.tensor(float(window))
    ...     all_reduce(total)
    ...     return float(total)
    >>> world = RankWorld(2)
    >>> world.run(step, [1, 2], 2), world.calls
    ([3.0, 3.0], [1, 1])
    """

    def __init__(self, size: int):
        self.size, self.calls, self.done = size, [0] * size, [False] * size
        self._cond, self._slots = threading.Condition(), {}

    def _complete(self, i: int) -> bool:
        joined = self._slots[i]
        return len(joined) == self.size or any(self.done[r] and r not in joined for r in range(self.size))

    def all_reduce_for(self, rank: int) -> Callable:
        def all_reduce(tensor, *args, **kwargs):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"all_reduce sums a tensor in place over the ranks, got {type(tensor).__name__}")
            with self._cond:
                i, self.calls[rank] = self.calls[rank], self.calls[rank] + 1
                self._slots.setdefault(i, {})[rank] = tensor.detach().clone()
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._complete(i), timeout=30)
                if len(self._slots[i]) < self.size:
                    raise RuntimeError("all_reduce: another rank never joined this all_reduce (a real run hangs here)")
                total = functools.reduce(torch.add, (self._slots[i][r] for r in range(self.size)))
            with torch.no_grad():
                tensor.copy_(total)

        return all_reduce

    def run(self, step, windows, world_size: int) -> list:
        """``step(window, world_size, all_reduce)`` on every rank at once; its results (or the exception it raised)."""
        results: list = [None] * self.size

        def rank_main(rank: int) -> None:
            try:
                results[rank] = step(windows[rank], world_size, self.all_reduce_for(rank))
            except Exception as exc:  # noqa: BLE001  handed back to the checker's thread
                results[rank] = exc
            finally:
                with self._cond:
                    self.done[rank] = True
                    self._cond.notify_all()

        threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results
