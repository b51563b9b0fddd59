"""Saved-bytes accounting, the one home: what autograd keeps for backward, in bytes.

The rule, everywhere in the course: each storage counts once, with its full size (a saved
view keeps its whole base alive; a tensor saved by two nodes is one allocation), and storages
that exist anyway (parameters, the batch you hold) are left out, so what remains is the memory
the graph adds. Two ways to apply it:

* live, while a forward runs: :class:`SavedBytes` watches ``saved_tensors_hooks`` (eager
  autograd, custom Functions and compiled regions alike: all of them save through the hooks);
* after the fact, from a captured graph: :func:`distinct_bytes` over its saved records.

>>> import torch
>>> w = torch.randn(3, 4, requires_grad=True)
>>> x = torch.randn(2, 3)
>>> with SavedBytes(exclude=[w]) as saved:
...     loss = torch.relu(x @ w).sum()
>>> saved.total  # x (2×3) and relu's output (2×4), float32; w is left out
56
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import torch


def storage_key(tensor: torch.Tensor) -> int:
    """What identifies the memory a tensor lives in: its storage's address (views share it)."""
    return tensor.untyped_storage().data_ptr()


def distinct_bytes(storages: Iterable[tuple[Hashable | None, int]]) -> int:
    """The bytes of ``(storage key, nbytes)`` pairs, each storage once; a None key (no storage) counts nothing.

    >>> distinct_bytes([(1, 8), (1, 8), (2, 4), (None, 99)])
    12
    """
    sizes = {key: nbytes for key, nbytes in storages if key is not None}
    return sum(sizes.values())


@dataclass
class Stored:
    """One storage autograd saved: its bytes and the tag current when it was first saved."""

    nbytes: int
    tag: Hashable | None = None


@dataclass
class SavedBytes:
    """Count, while the block runs, the storages autograd saves for backward (each once, ``exclude`` left out).

    ``exclude``: tensors whose storages exist anyway (parameters, the input batch). ``tag``: called
    when a storage is first saved, e.g. to attribute it to the block running then
    (:meth:`by_tag`). The hooks pass tensors through unchanged: nothing about backward changes.

    >>> a = torch.ones(4, requires_grad=True)
    >>> with SavedBytes() as saved:
    ...     y = (a * a).exp()  # mul saves a twice (one storage), exp saves its output
    >>> saved.total, len(saved.storages)
    (32, 2)
    """

    exclude: Iterable[torch.Tensor] = ()
    tag: Callable[[], Hashable | None] = lambda: None
    storages: dict[int, Stored] = field(default_factory=dict)

    def __enter__(self) -> SavedBytes:
        existing = {storage_key(t) for t in self.exclude}

        def pack(t: torch.Tensor) -> torch.Tensor:
            key = storage_key(t)
            if key not in existing and key not in self.storages:
                self.storages[key] = Stored(t.untyped_storage().nbytes(), self.tag())
            return t

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    @property
    def total(self) -> int:
        """Bytes saved, each storage once."""
        return sum(s.nbytes for s in self.storages.values())

    def by_tag(self) -> dict[Hashable | None, int]:
        """Bytes saved per tag, in the order the tags first saved something."""
        out: dict[Hashable | None, int] = {}
        for stored in self.storages.values():
            out[stored.tag] = out.get(stored.tag, 0) + stored.nbytes
        return out


__all__ = ["SavedBytes", "Stored", "distinct_bytes", "storage_key"]
