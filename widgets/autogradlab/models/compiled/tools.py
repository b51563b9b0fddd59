"""The learner's debugging tools from earlier chapters, run on a compiled function.

>>> import torch
>>> x = torch.tensor([-1.0, 4.0], requires_grad=True)
>>> anomaly_report(lambda: torch.where(x > 0, x.sqrt(), 0.0).sum())
"RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output."

Compiled autograd traces a whole ``backward()`` into one graph, hooks included:

>>> w = torch.ones(2, requires_grad=True)
>>> h = w * 3
>>> _ = h.register_hook(lambda g: 2 * g)
>>> graphs = compiled_backward(h.sum())
>>> len(graphs), backward_steps(graphs[0])[-3:], w.grad.tolist()  # the hook's mul, then w * 3's backward
(1, ['mul', 'MulBackward0', 'AccumulateGrad'], [6.0, 6.0])
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autogradlab.models.compiled.record import quiet
from autogradlab.torch_internals import compiled_autograd


def anomaly_report(loss_fn: Callable[[], torch.Tensor]) -> str:
    """Run ``loss_fn().backward()`` under anomaly detection; return what it raised (first line), or 'no error'.

    Anomaly mode also prints the forward call's traceback as a warning, with file paths that change
    from run to run: held back here, the error names the node.
    """
    with quiet():
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss_fn().backward()
        except RuntimeError as exc:
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return "no error"


def compiled_backward(loss: torch.Tensor) -> list[torch.fx.GraphModule]:
    """Run ``loss.backward()`` under compiled autograd; return the backward graphs it traced (run as traced).

    The graph holds every node's backward formula as ATen ops: eager nodes, the backward of each
    compiled piece, and the tensor hooks between them, in the order the engine would run them.
    """
    graphs: list[torch.fx.GraphModule] = []

    def keep(graph: torch.fx.GraphModule, example_inputs: object) -> Callable:
        graphs.append(graph)
        return graph.forward

    with quiet(), compiled_autograd(torch.compile(backend=keep)):
        loss.backward()
    return graphs


# Compiled autograd's own calls around the math: unpacking inputs, checking outputs, a compiled piece's prologue.
_BOOKKEEPING = ("getitem", "validate_outputs", "call_aot_bwd_prologue", "call_aot_bwd_epilogue")


def backward_steps(graph: torch.fx.GraphModule) -> list[str]:
    """What a compiled-autograd graph computes, in order: ATen ops by short name (``mm``), eager nodes it
    calls as one op (``MulBackward0``, ``AccumulateGrad``) and a hook's Python arithmetic (``mul``)."""
    steps = []
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        packet = getattr(target, "overloadpacket", None)
        name = getattr(packet or target, "__name__", None) or str(target).rsplit(".", 1)[-1]
        if name not in _BOOKKEEPING:
            steps.append(name)
    return steps
