"""Jacobians and vector-Jacobian products of small ops: the model behind the VJPExplorer (chapter 03).

An op maps its inputs to one output tensor. For the input we differentiate
(``wrt``), the Jacobian J has one row per output element and one column per
input element; an upstream vector v (the gradient arriving from later layers,
shaped like the output) gives the VJP vᵀJ, shaped like the input. Autograd
computes the same VJP without ever building J; :func:`explore` computes both
and their difference.

>>> result = explore("softmax", [(2, 3)], dim=-1)
>>> result.jacobian.shape          # 6 output elements × 6 input elements
torch.Size([6, 6])
>>> result.difference < 1e-12      # vᵀJ and autograd's VJP agree
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autogradlab.i18n import N_

MAX_DIMS = 3
MAX_SIZE = 6
MAX_NUMEL = 24  # keeps the Jacobian (at most 24 × 24) readable as a heatmap
UPSTREAM_KINDS = ("random", "ones", "one-hot")


class ShapeError(ValueError):
    """A shape, dim or upstream choice that the op cannot take; the message says why and what would work."""


@dataclass(frozen=True)
class Op:
    """One differentiable op: its formula, input names, default shapes and ``fn(*inputs, dim=...)``."""

    name: str
    formula: str
    inputs: tuple[str, ...]
    default_shapes: tuple[tuple[int, ...], ...]
    fn: Callable[..., torch.Tensor]
    uses_dim: bool = False
    notes: tuple[tuple[str, str], ...] = ()  # (input name, what to notice in its Jacobian)

    def note(self, wrt: str) -> str:
        """What to look for in the Jacobian with respect to input ``wrt``."""
        return dict(self.notes).get(wrt, "")


def _layer_norm(x: torch.Tensor, dim: int) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:])


OPS: dict[str, Op] = {
    op.name: op
    for op in [
        Op(
            "matmul",
            "Y = X @ W",
            ("X", "W"),
            ((2, 3), (3, 4)),
            lambda X, W, dim: X @ W,
            notes=(
                ("X", N_("block structure: row n of Y depends only on row n of X, through the same W. vᵀJ = V Wᵀ.")),
                ("W", N_("every output depends on a column of W; the VJP Xᵀ V adds up the contributions of all rows.")),
            ),
        ),
        Op(
            "relu",
            "y = relu(x)",
            ("x",),
            ((2, 3),),
            lambda x, dim: torch.relu(x),
            notes=(("x", N_("diagonal: 1 where x > 0, 0 elsewhere. The VJP just masks v; J is never needed.")),),
        ),
        Op(
            "softmax",
            "y = softmax(x, dim)",
            ("x",),
            ((2, 3),),
            lambda x, dim: torch.softmax(x, dim),
            True,
            notes=(
                (
                    "x",
                    N_(
                        "one block diag(y) − y yᵀ per slice along dim. Its columns sum to 0 (a slice's outputs always sum "
                        "to 1), so v = ones gives a zero VJP; its rows sum to 0 too, a different fact (adding a constant "
                        "to a slice changes nothing)."
                    ),
                ),
            ),
        ),
        Op(
            "logsumexp",
            "y = logsumexp(x, dim)",
            ("x",),
            ((2, 3),),
            lambda x, dim: torch.logsumexp(x, dim),
            True,
            notes=(
                ("x", N_("each row of J is the softmax of one slice: the VJP is v (broadcast back) ⊙ softmax(x).")),
            ),
        ),
        Op(
            "layer norm",
            N_("y = layer_norm(x) over the last dim (no affine)"),
            ("x",),
            ((2, 4),),
            _layer_norm,
            notes=(
                (
                    "x",
                    N_(
                        "dense within each row: every output of a row depends on every input of it, through mean and variance."
                    ),
                ),
            ),
        ),
        Op(
            "broadcasting add",
            "y = x + b",
            ("x", "b"),
            ((3, 4), (4,)),
            lambda x, b, dim: x + b,
            notes=(
                ("x", N_("the identity: x + b passes v straight through to x.")),
                (
                    "b",
                    N_(
                        "one 1 in each column for every position that entry of b was copied to (exercise 2: what is vᵀJ?)."
                    ),
                ),
            ),
        ),
        Op(
            "sum over a dim",
            "y = x.sum(dim)",
            ("x",),
            ((2, 3),),
            lambda x, dim: x.sum(dim),
            True,
            notes=(("x", N_("all ones in the pattern of the reduced dim: the VJP copies v back along dim.")),),
        ),
        Op(
            "mean over a dim",
            "y = x.mean(dim)",
            ("x",),
            ((2, 3),),
            lambda x, dim: x.mean(dim),
            True,
            notes=(
                ("x", N_("the pattern of the sum, with every entry 1 / (size of dim) (exercise 3: what is vᵀJ?).")),
            ),
        ),
    ]
}


@dataclass(frozen=True)
class Exploration:
    """Everything the explorer shows for one choice of op, shapes, dim, input and upstream vector."""

    op: Op
    shapes: tuple[tuple[int, ...], ...]
    dim: int
    wrt: str
    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor
    jacobian: torch.Tensor  # (output.numel(), inputs[wrt].numel())
    v: torch.Tensor  # shaped like the output
    vjp_from_jacobian: torch.Tensor  # shaped like the input
    vjp_from_autograd: torch.Tensor
    difference: float  # max |vᵀJ − autograd's VJP|


def parse_shape(text: str) -> tuple[int, ...]:
    """Read a shape typed by a learner: ``"2, 3"``, ``"(2, 3)"``, ``"2x3"``; ``"()"`` or ``""`` is a 0-dim tensor.

    >>> parse_shape("(2, 3)")
    (2, 3)
    """
    body = text.strip().strip("()[]").strip()
    if not body:
        return ()
    parts = [p for p in re.split(r"[,x×\s]+", body) if p]
    if not all(p.isdigit() for p in parts):
        raise ShapeError(f"cannot read the shape {text!r}: write sizes separated by commas, like 2, 3")
    return tuple(int(p) for p in parts)


def _check_shape(name: str, shape: tuple[int, ...]) -> None:
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"{name} has {len(shape)} dims: use at most {MAX_DIMS} so the picture stays readable")
    if any(size < 1 or size > MAX_SIZE for size in shape):
        raise ShapeError(f"{name} has shape {shape}: every size must be between 1 and {MAX_SIZE}")
    if math.prod(shape) > MAX_NUMEL:
        raise ShapeError(
            f"{name} has {math.prod(shape)} elements: use at most {MAX_NUMEL} so the Jacobian stays readable"
        )


def _check_compatible(op: Op, shapes: tuple[tuple[int, ...], ...], dim: int) -> None:
    """Explain, before running the op, the shape rules it would fail with."""
    if op.name == "matmul":
        (a, b) = shapes
        if len(a) < 1 or len(b) < 1:
            raise ShapeError("matmul needs X and W with at least one dim each")
        inner_w = b[0] if len(b) == 1 else b[-2]
        if a[-1] != inner_w:
            raise ShapeError(
                f"X @ W needs X's last dim ({a[-1]}) to equal W's {'only' if len(b) == 1 else 'second-to-last'} dim "
                f"({inner_w}): try W of shape ({a[-1]}, {b[-1]})"
            )
    if op.name == "broadcasting add":
        try:
            torch.broadcast_shapes(*shapes)
        except RuntimeError:
            raise ShapeError(
                f"x {shapes[0]} and b {shapes[1]} do not broadcast: dims are matched from the right and each pair "
                "must be equal or contain a 1. Try b of shape "
                f"{shapes[0][-1:]} (one value per column) or {shapes[0][:-1] + (1,)} (one value per row)"
            ) from None
    if op.name == "layer norm" and len(shapes[0]) < 1:
        raise ShapeError("layer norm normalises over the last dim: x needs at least one dim")
    if op.uses_dim:
        ndim = len(shapes[0])
        if ndim == 0:
            raise ShapeError(f"{op.name} works along a dim, but x is 0-dim: give x at least one dim")
        if not -ndim <= dim < ndim:
            raise ShapeError(
                f"dim={dim} does not exist for x of shape {shapes[0]}: pick a dim from {-ndim} to {ndim - 1}"
            )


def make_inputs(op: Op, shapes: Sequence[tuple[int, ...]], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Seeded float64 inputs of the given shapes (standard normal), so the same choice shows the same numbers."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(tuple(shape), generator=gen, dtype=torch.float64) for shape in shapes)  # () too


def jacobian(fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], wrt: int) -> torch.Tensor:
    """The Jacobian of ``fn(*inputs)`` with respect to ``inputs[wrt]`` as a 2-D matrix (outputs × inputs).

    Built with ``torch.func.jacrev``: one reverse pass per output element, batched with vmap.

    >>> jacobian(lambda a: 3 * a, [torch.ones(2, dtype=torch.float64)], 0)
    tensor([[3., 0.],
            [0., 3.]], dtype=torch.float64)
    """
    full = torch.func.jacrev(fn, argnums=wrt)(*inputs)
    out_numel = fn(*inputs).numel()
    return full.reshape(out_numel, inputs[wrt].numel())


def vjp_from_jacobian(J: torch.Tensor, v: torch.Tensor, input_shape: Sequence[int]) -> torch.Tensor:
    """vᵀJ: flatten v, multiply by the explicit Jacobian, reshape to the input's shape.

    >>> vjp_from_jacobian(torch.eye(2, dtype=torch.float64) * 3, torch.tensor([1.0, 2.0], dtype=torch.float64), (2,))
    tensor([3., 6.], dtype=torch.float64)
    """
    return (v.reshape(-1) @ J).reshape(tuple(input_shape))


def autograd_vjp(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], wrt: int, v: torch.Tensor
) -> torch.Tensor:
    """The VJP as autograd computes it: one backward pass with ``grad_outputs=v``, no Jacobian built.

    >>> autograd_vjp(lambda a: a**2, [torch.tensor([1.0, 2.0], dtype=torch.float64)], 0, torch.ones(2, dtype=torch.float64))
    tensor([2., 4.], dtype=torch.float64)
    """
    leaves = [t.detach().requires_grad_(i == wrt) for i, t in enumerate(inputs)]
    (grad,) = torch.autograd.grad(fn(*leaves), leaves[wrt], v)
    return grad


def upstream(kind: str, shape: Sequence[int], *, index: int = 0, seed: int = 1) -> torch.Tensor:
    """An upstream vector v shaped like the output: ``"random"``, ``"ones"`` or ``"one-hot"`` at flat ``index``.

    A one-hot v picks out one row of the Jacobian: vᵀJ is then that row.

    >>> upstream("one-hot", (2, 2), index=3)
    tensor([[0., 0.],
            [0., 1.]], dtype=torch.float64)
    """
    shape = tuple(shape)
    if kind == "random":
        return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)  # () too
    if kind == "ones":
        return torch.ones(shape, dtype=torch.float64)
    if kind == "one-hot":
        numel = math.prod(shape)
        if not 0 <= index < numel:
            raise ShapeError(f"the one-hot index {index} is outside the output's {numel} elements (0 to {numel - 1})")
        v = torch.zeros(numel, dtype=torch.float64)
        v[index] = 1.0
        return v.reshape(shape)
    raise ShapeError(f"unknown upstream vector {kind!r}: choose one of {', '.join(UPSTREAM_KINDS)}")


def explore(
    op_name: str,
    shapes: Sequence[Sequence[int]] | None = None,
    *,
    dim: int = -1,
    wrt: int | str = 0,
    v: str = "random",
    index: int = 0,
    seed: int = 0,
) -> Exploration:
    """Jacobian, upstream v, vᵀJ and autograd's VJP for one op; raises :class:`ShapeError` for invalid choices.

    >>> r = explore("sum over a dim", [(2, 3)], dim=0, v="ones")
    >>> r.vjp_from_autograd          # every input element gets the gradient 1
    tensor([[1., 1., 1.],
            [1., 1., 1.]], dtype=torch.float64)
    """
    if op_name not in OPS:
        raise ShapeError(f"unknown op {op_name!r}: choose one of {', '.join(OPS)}")
    op = OPS[op_name]
    shapes = tuple(tuple(int(s) for s in shape) for shape in (shapes or op.default_shapes))
    if len(shapes) != len(op.inputs):
        raise ShapeError(
            f"{op.name} takes {len(op.inputs)} input(s) ({', '.join(op.inputs)}), got {len(shapes)} shape(s)"
        )
    for name, shape in zip(op.inputs, shapes):
        _check_shape(name, shape)
    _check_compatible(op, shapes, dim)
    wrt_index = op.inputs.index(wrt) if isinstance(wrt, str) and wrt in op.inputs else wrt
    if not isinstance(wrt_index, int) or not 0 <= wrt_index < len(op.inputs):
        raise ShapeError(f"{op.name} has inputs {', '.join(op.inputs)}: cannot differentiate with respect to {wrt!r}")

    inputs = make_inputs(op, shapes, seed)
    fn = lambda *args: op.fn(*args, dim=dim)  # noqa: E731  (the dim is fixed for this exploration)
    output = fn(*inputs)
    if output.numel() > MAX_NUMEL:
        raise ShapeError(f"the output has {output.numel()} elements: use smaller shapes (at most {MAX_NUMEL})")
    J = jacobian(fn, inputs, wrt_index)
    vector = upstream(v, output.shape, index=index, seed=seed + 1)
    by_jacobian = vjp_from_jacobian(J, vector, shapes[wrt_index])
    by_autograd = autograd_vjp(fn, inputs, wrt_index, vector)
    difference = float((by_jacobian - by_autograd).abs().max()) if by_jacobian.numel() else 0.0
    return Exploration(
        op, shapes, dim, op.inputs[wrt_index], inputs, output.detach(), J, vector, by_jacobian, by_autograd, difference
    )


def rounding_level(r: Exploration) -> float:
    """How large rounding alone can make an entry of vᵀJ: the dtype's eps times the largest Σᵢ |vᵢ Jᵢⱼ|.

    An entry of vᵀJ (or of autograd's VJP) within a small multiple of this is zero up to
    rounding, whatever its printed digits: softmax with v = ones gives such entries.

    >>> r = explore("softmax", [(2, 3)], v="ones")
    >>> float(r.vjp_from_jacobian.abs().max()) < 10 * rounding_level(r)
    True
    """
    terms = r.v.reshape(-1).abs() @ r.jacobian.abs()
    return torch.finfo(r.jacobian.dtype).eps * float(terms.max()) if terms.numel() else 0.0
