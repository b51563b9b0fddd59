"""autogradlab.models.compiled: what torch.compile records, saves and recomputes, read from its graphs.

Every reading of a graph is checked against a measurement: the saved bytes against the saved-tensor
hooks (SavedBytes, the one home), the FLOPs against FlopCounterMode, the graphs against a second run.
"""

import logging

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from autogradlab.graph import capture
from autogradlab.graph.saved_bytes import SavedBytes
from autogradlab.models.compiled import (
    OPTIONS,
    build,
    compare,
    compile_recorded,
    graph_breaks,
    graph_flops,
    new_gelu,
    op_names,
    quiet,
    read_partition,
    save_only,
    with_policy,
)


@pytest.fixture(autouse=True)
def _compiler_logs_off():
    # pytest's log capture would switch on torch's structured trace (a graph dump per compile): slow.
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def run_recorded(fn, args, partition, decompose=True):
    """Compile, run forward+backward once, then measure the saved bytes of a second forward with the hooks."""
    compiled, rec = compile_recorded(fn, partition=partition, decompose=decompose)
    with quiet():
        out = compiled(*args)
        out.backward(torch.ones_like(out))
        with SavedBytes(exclude=list(args)) as saved:
            out = compiled(*args)
    return rec, saved.total


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


FUNCTIONS = {
    # name: (function, inputs); saved values of each kind: inputs, views of inputs, new, views of new
    "mlp-gelu": (
        lambda x, w1, w2: (F.gelu(x @ w1) @ w2).tanh(),
        lambda: (
            torch.randn(6, 4, generator=gen()),
            torch.randn(4, 8, requires_grad=True),
            torch.randn(8, 3, requires_grad=True),
        ),
    ),
    "attention": (
        lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 2, -1) @ v,
        lambda: tuple(torch.randn(2, 5, 4, generator=gen(i), requires_grad=True) for i in range(3)),
    ),
    "float64-norm": (
        lambda x, g: ((x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, keepdim=True) + 1e-5) * g).sum(-1),
        lambda: (
            torch.randn(7, 5, dtype=torch.float64, requires_grad=True),
            torch.randn(5, dtype=torch.float64, requires_grad=True),
        ),
    ),
    "reshaped": (
        lambda x, w: (x @ w).reshape(3, 16).exp().reshape(6, 8).cos(),
        lambda: (torch.randn(6, 5, generator=gen()), torch.randn(5, 8, requires_grad=True)),
    ),
}


@pytest.mark.parametrize("partition", ["default", "min-cut"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_bytes_read_from_the_graphs_are_the_bytes_the_hooks_measure(name, partition):
    fn, inputs = FUNCTIONS[name]
    rec, measured = run_recorded(fn, inputs(), partition)
    part = read_partition(rec)
    assert part.new_bytes == measured > 0
    assert all(v.source in ("new", "input", "view of an input") for v in part.saved)
    assert {v.name for v in part.saved} == {
        n.name for n in rec.backward[0].graph.find_nodes(op="placeholder") if not n.name.startswith("tangents")
    }


def test_min_cut_recomputes_a_pointwise_chain_that_the_default_partition_saves():
    x = torch.randn(8, requires_grad=True)
    default, _ = run_recorded(lambda t: t.cos().cos(), (x,), "default", decompose=False)
    mincut, _ = run_recorded(lambda t: t.cos().cos(), (x,), "min-cut", decompose=False)
    assert [v.name for v in read_partition(default).saved] == ["primals_1", "cos"]
    assert read_partition(default).recomputed == ()
    assert [v.name for v in read_partition(mincut).saved] == ["primals_1"]
    assert read_partition(mincut).recomputed == ("cos",)
    assert op_names(mincut.forward[0]) == ["cos", "cos"]


def test_graph_flops_are_what_flop_counter_mode_counts():
    model, x = build("mlp")
    compiled, rec = compile_recorded(lambda t: model(t).square().mean(), partition="min-cut")
    with quiet():
        compiled(x).backward()
    with FlopCounterMode(display=False) as counter:
        model(x).square().mean().backward()
    assert (
        graph_flops(rec.forward[0].graph.nodes) + graph_flops(rec.backward[0].graph.nodes) == counter.get_total_flops()
    )


def test_a_selective_policy_that_saves_nothing_recomputes_every_matmul():
    model, x = build("mlp")
    compiled, rec = compile_recorded(lambda t: with_policy(model, save_only([]))(t).square().mean())
    with quiet():
        compiled(x).backward()
    part = read_partition(rec)
    assert part.new_bytes == 0  # only the input batch is kept
    assert part.recomputed_flops == part.forward_flops  # the whole forward, matmuls included, again
    assert part.recomputed.count("addmm") == 4


def test_the_side_by_side_numbers_of_the_chapter():
    mlp = {option: compare("mlp", option) for option in OPTIONS}
    block = {option: compare("block", option) for option in OPTIONS}
    default, mincut, policy = (mlp[o] for o in OPTIONS)
    # the hand-written GELU: eager saves each intermediate, min-cut recomputes them, the policy only keeps matmuls
    assert default.eager_bytes == default.compiled_bytes == 86016
    assert mincut.compiled_bytes == 36864 and policy.compiled_bytes == 20480
    assert all(c.compiled_bytes == c.compiled.new_bytes for c in (*mlp.values(), *block.values()))
    assert all(c.compiled_flops == c.eager_flops and c.compiled.recomputed_flops == 0 for c in mlp.values())
    assert "tanh" in mincut.compiled.recomputed and "tanh" not in default.compiled.recomputed
    # F.gelu is one op: nothing left for min-cut to win; the policy recomputes the norms and the GELU
    assert (
        block[OPTIONS_LIST[0]].compiled_bytes
        == block[OPTIONS_LIST[1]].compiled_bytes
        == block[OPTIONS_LIST[0]].eager_bytes
    )
    assert block[OPTIONS_LIST[2]].compiled_bytes < block[OPTIONS_LIST[1]].compiled_bytes
    eager = {(r.node, r.name): r for r in default.eager}
    assert eager[("AddmmBackward0", "mat2")].source == "parameter"
    assert compare("mlp", "min-cut") is mincut  # cached: a view redraws without compiling


OPTIONS_LIST = list(OPTIONS)


def test_eager_side_marks_the_batch_and_parameters():
    c = compare("mlp", "default")
    sources = {r.source for r in c.eager}
    assert sources == {"new", "parameter", "input"}
    assert sum(r.nbytes for r in c.eager if r.source == "input") == 16 * 32 * 4


def test_graph_breaks_name_the_reason_and_the_line():
    def step(x):
        y = x.sin()
        print("mean", float(y.mean()))
        if y.sum() > 0:
            y = y * 2
        return y.cos()

    found = graph_breaks(step, torch.ones(3))
    assert found.graphs == 3
    assert [b.line for b in found.breaks] == ['print("mean", float(y.mean()))', "if y.sum() > 0:"]
    assert "item()" in found.breaks[0].reason and found.breaks[1].reason.startswith("generic_jump")
    assert graph_breaks(lambda x: x.sin().cos(), torch.ones(3)).breaks == ()


def test_a_shape_change_recompiles_once_then_the_shape_is_symbolic():
    compiled, rec = compile_recorded(lambda x, s: (x * s).sin().sum(), partition=None, dynamic=None)
    counts = []
    with quiet():
        for rows, scale in ((4, 2.0), (8, 2.0), (16, 2.0), (16, 3.0)):
            compiled(torch.ones(rows, 3), scale)
            counts.append(rec.compiles)
    assert counts == [1, 2, 2, 3]  # new shape: recompile, dynamic from then on; a new Python float: recompile


def test_new_gelu_is_gelus_tanh_approximation():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    assert torch.allclose(new_gelu(x), F.gelu(x, approximate="tanh"))


def test_eager_capture_sees_compiled_nodes():
    model, x = build("mlp")
    compiled, _ = compile_recorded(lambda t: model(t).square().mean())
    with quiet():
        loss = compiled(x)
    graph = capture(loss, params={**dict(model.named_parameters()), "batch": x})
    assert [n.name for n in graph.nodes if n.kind == "op"] == ["CompiledFunctionBackward"]
    assert graph.activation_bytes() == compare("mlp", "min-cut").compiled_bytes
