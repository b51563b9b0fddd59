"""How often each node of a graph runs, counted by the unpacks of the tensors it saved.

A node reads its saved tensors each time it runs, so saved-tensor hooks count runs even
when the learner's code calls the nodes itself (chapter 01's reverse sweep). It lives apart
from the chapter's checker because the hooks are called from inside the learner's node calls,
and the checker's own module is off limits to the learner's code.

>>> import torch
>>> runs = NodeRuns()
>>> x = torch.ones(2, requires_grad=True)
>>> with runs.recording():
...     y = x.exp().sum()
>>> y.backward()
>>> runs.most
1
"""

from __future__ import annotations

import torch


class NodeRuns:
    """Saved-tensor hooks that count how often each saved tensor is unpacked: once per run of its node."""

    def __init__(self):
        self.counts: list[int] = []

    def _pack(self, tensor):
        self.counts.append(0)
        return len(self.counts) - 1, tensor

    def _unpack(self, packed):
        index, tensor = packed
        self.counts[index] += 1
        return tensor

    def recording(self):
        """A context manager: the graph built inside it counts its node runs into :attr:`counts`."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @property
    def most(self) -> int:
        """The most runs of any node that saved a tensor (0 before backward)."""
        return max(self.counts, default=0)
