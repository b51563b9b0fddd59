"""autogradlab.graph.capture against PyTorch itself: structure, shapes, saved tensors, states."""

import re

import pytest
import torch

from autogradlab.graph import Graph, capture, format_shape
from autogradlab.render import to_svg
from autogradlab.units import format_bytes


def names(g: Graph) -> list[str]:
    return [n.name for n in g.nodes]


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_small_graph_structure_kinds_shapes_and_edges():
    w = torch.randn(3, 2, requires_grad=True)
    x = torch.randn(5, 3)
    g = capture((x @ w).relu().sum(), params={"w": w})
    assert names(g) == ["output", "SumBackward0", "ReluBackward0", "MmBackward0", "AccumulateGrad"]
    assert [n.kind for n in g.nodes] == ["output", "op", "op", "op", "leaf"]
    assert [n.id for n in g.nodes] == [0, 1, 2, 3, 4]
    assert [n.shape for n in g.nodes] == [(), (), (5, 2), (5, 2), (3, 2)]
    assert all(n.dtype == torch.float32 for n in g.nodes)
    assert g.nodes[4].param_name == "w" and g.params_with_grad() == ["w"]
    assert list(g.edges) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert [e.shape for e in g.edges] == [(), (5, 2), (5, 2), (3, 2)]
    src, dst = g.edges[-1]
    assert (src, dst) == (g.edges[-1].src, g.edges[-1].dst) == (3, 4)
    mm = g.find("MmBackward0")[0]
    assert mm.inputs_without_grad == 1  # x does not require grad: next_functions holds (None, 0)
    assert [(s.name, s.shape) for s in mm.saved] == [("self", (5, 3))]  # only x: the grad wrt w needs x
    assert g.find("ReluBackward0")[0].saved[0].name == "result"


def test_ten_thousand_op_chain_is_walked_without_recursion():
    x = torch.randn(3, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    g = capture(y.sum(), params={"x": x})
    assert len(g.nodes) == 10_003 and len(g.edges) == 10_002
    assert names(g)[2:5] == ["MulBackward0"] * 3 and g.nodes[-1].param_name == "x"
    # Nodes come in gradient-flow order: every edge points to a later node.
    assert all(src < dst for src, dst in g.edges)


def test_node_order_is_the_order_backward_really_runs():
    model = mlp()
    x = torch.randn(6, 4)
    loss = model(x).pow(2).mean()
    g = capture(loss, params=model)
    ran = []
    stack, seen = [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        fn.register_prehook(lambda grads, fn=fn: ran.append(fn.name().removeprefix("torch::autograd::")))
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    loss.backward()
    assert names(g)[1:] == ran


def test_ids_are_stable_across_runs_of_the_same_program():
    def run():
        model = mlp()
        out = model(torch.randn(5, 4)).softmax(-1)
        return capture(out[:, 0].sum(), params=model)

    a, b = run(), run()
    assert [(n.id, n.name, n.param_name, n.shape) for n in a.nodes] == [
        (n.id, n.name, n.param_name, n.shape) for n in b.nodes
    ]
    assert list(a.edges) == list(b.edges)
    assert to_svg(a) == to_svg(b)


def test_parameter_names_from_module_dict_or_pairs_and_unused_parameter_absent():
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(2, 2), "unused": torch.nn.Linear(2, 2)})
    loss = model["used"](torch.randn(3, 2)).sum()
    for params in (model, dict(model.named_parameters()), list(model.named_parameters())):
        assert sorted(capture(loss, params=params).params_with_grad()) == ["used.bias", "used.weight"]
    unnamed = capture(loss)
    assert [n.param_name for n in unnamed.leaves] == [None, None]
    assert [n.label for n in unnamed.leaves] == ["leaf", "leaf"]


def test_tuple_outputs_share_one_multi_output_node():
    a = torch.randn(6, 4, requires_grad=True)
    p, q = (a * 2).split([2, 4])
    g = capture((p.sum(), q.mean()), params={"a": a})
    assert [n.name for n in g.outputs] == ["output 0", "output 1"]
    split = g.find("SplitWithSizesBackward0")[0]
    assert split.output_shapes == [(2, 4), (4, 4)]
    into_split = [e for e in g.edges if e.dst == split.id]
    assert sorted(e.shape for e in into_split) == [(2, 4), (4, 4)]
    assert len(g.find("SplitWithSizesBackward0")) == 1


def test_same_leaf_used_twice_gives_two_edges():
    x = torch.randn(3, requires_grad=True)
    g = capture((x * x).sum(), params={"x": x})
    mul, leaf = g.find("MulBackward0")[0], g.find("x")[0]
    assert [tuple(e) for e in g.edges].count((mul.id, leaf.id)) == 2
    assert [s.name for s in mul.saved] == ["other", "self"]
    assert mul.saved[0].storage == mul.saved[1].storage  # one tensor saved twice


def test_views_and_in_place_ops_copyslices_and_asstrided():
    a = torch.randn(4, 3, requires_grad=True)
    b = a * 1
    b[0] = 5.0  # indexed assignment on a non-leaf: CopySlices
    c = b.view(-1)[::2]
    c.mul_(2)  # in-place on a view: the base's history is rewritten
    d = b.as_strided((2, 2), (1, 3))
    g = capture(d.sum(), params={"a": a})
    assert "CopySlices" in names(g) and "AsStridedBackward0" in names(g)
    copy = g.find("CopySlices")
    assert all(n.shape == (4, 3) for n in copy)
    d.sum().backward()
    assert a.grad is not None  # the captured graph is the one backward runs


def test_custom_autograd_function_saved_tensors_and_ctx_attributes():
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.shadow = x * 2  # not via save_for_backward
            ctx.scale = scale
            return x**3 * scale

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x**2 * ctx.scale * grad, None

    x = torch.randn(5, requires_grad=True)
    y = Cube.apply(x, 2.0)
    g = capture(y.sum(), params={"x": x})
    node = g.find("CubeBackward")[0]
    assert node.kind == "op" and node.shape == (5,)
    assert [(s.name, s.shape, s.state) for s in node.saved] == [
        ("saved_tensors[0]", (5,), "ok"),
        ("ctx.shadow", (5,), "ok"),
    ]
    assert node.saved[0].leaf_name == "x" and "save_for_backward" in node.saved[1].note
    y.sum().backward()
    after = capture(y)
    states = {s.name: s.state for s in after.find("CubeBackward")[0].saved}
    assert states == {"saved_tensors": "freed", "ctx.shadow": "ok"}  # ctx attributes are never freed


def test_after_backward_saved_tensors_are_freed_and_not_counted():
    model = mlp()
    loss = model(torch.randn(6, 4)).pow(2).mean()
    before = capture(loss, params=model)
    assert not before.freed and before.saved_bytes() > 0
    loss.backward()
    after = capture(loss, params=model)
    assert after.freed
    assert {s.state for _, s in after.saved_tensors()} == {"freed"}
    assert all(s.shape is None and s.nbytes == 0 for _, s in after.saved_tensors())
    assert after.saved_bytes() == 0
    assert names(after) == names(before)  # the structure is still there
    assert "freed" in repr(after)


def test_stale_saved_tensor_is_named_with_op_and_versions_before_backward():
    w = torch.randn(3, requires_grad=True)
    u = w * 2
    v = u.pow(2)
    u.add_(1)
    g = capture(v.sum(), params={"w": w})
    ((node, saved),) = g.stale
    assert node.name == "PowBackward0" and saved.name == "self"
    assert (saved.version_saved, saved.version_now) == (0, 1)
    assert saved.modified_by == "add_"
    assert "add_" in saved.note and "version 0 → 1" in saved.note
    assert "STALE" in repr(g)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        v.sum().backward()


def test_stale_output_of_the_node_itself_and_input_without_grad():
    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    y.mul_(2)  # exp saved its own result
    g = capture(y.sum(), params={"x": x})
    ((node, saved),) = g.stale
    assert (node.name, saved.name, saved.version_saved, saved.version_now) == ("ExpBackward0", "result", 0, 1)
    data = torch.randn(3)
    w = torch.randn(3, requires_grad=True)
    out = data * w
    data.mul_(3)  # data needs no grad, but mul saved it to compute w's gradient
    ((node, saved),) = capture(out.sum()).stale
    assert (node.name, saved.name) == ("MulBackward0", "self")
    assert saved.modified_by is None and "version 0 → 1" in saved.note


def test_modifying_through_data_is_not_detected_like_pytorch():
    w = torch.randn(3, requires_grad=True)
    u = w * 2
    v = u.pow(2)
    u.data.add_(1)  # .data has its own version counter: autograd cannot see this change
    assert capture(v.sum()).stale == []


def test_shared_storage_counted_once_and_matches_saved_tensor_hooks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(10, 8)
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).relu().sum()
    g = capture(loss, params=model)
    assert g.saved_bytes() == sum(storages.values())
    per_tensor = sum(s.nbytes for _, s in g.saved_tensors())
    assert per_tensor > g.saved_bytes()  # relu's result is also the next layer's input: one storage
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert g.activation_bytes() == sum(v for k, v in storages.items() if k not in params)
    assert g.activation_bytes() == 4 * (10 * 8 + 10 * 16 + 10 * 4)  # x, hidden relu output, output relu
    weight = [s for _, s in g.saved_tensors() if s.leaf_name == "2.weight"]
    assert [(s.name, s.shape) for s in weight] == [("mat2", (16, 4))]  # Wᵀ: a view of the parameter


def test_saved_tensors_packed_by_hooks_are_reported_without_calling_unpack():
    calls = []
    w = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: calls.append(1) or t):
        y = (w * 2).pow(2).sum()
    g = capture(y)
    (saved,) = g.find("PowBackward0")[0].saved
    assert saved.state == "ok" and "hook" in saved.note and calls == []


def test_optional_saved_tensors_absent_and_saved_lists_indexed():
    x = torch.randn(2, 5, requires_grad=True)
    g = capture(torch.nn.LayerNorm(5, elementwise_affine=False)(x).sum())
    assert [s.name for s in g.find("NativeLayerNormBackward0")[0].saved] == ["input", "result1", "result2"]
    a = torch.randn(5, 3, requires_grad=True)
    g = capture((a * 1)[torch.tensor([0, 2])].sum())
    assert [(s.name, s.dtype) for s in g.find("IndexBackward0")[0].saved] == [("indices[0]", torch.int64)]


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: (torch.ones(2, requires_grad=True) * 2).sum().item(), TypeError, ".item()"),
        (lambda: torch.ones(2, requires_grad=True), ValueError, "leaf"),
        (lambda: torch.ones(2) * 2, ValueError, "no_grad"),
        (lambda: (torch.ones(2, requires_grad=True) * 2).tolist(), TypeError, ".tolist()"),
        (lambda: "loss", TypeError, "str"),
        (lambda: (), ValueError, "at least one"),
    ],
)
def test_bad_input_is_a_clear_error(make, error, words):
    with pytest.raises(error, match=re.escape(words)):
        capture(make())


def test_formatting_helpers():
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB" and format_bytes(2_500_000) == "2.38 MiB"
    assert format_shape((5,)) == "(5,)" and format_shape(()) == "()" and format_shape(None) == "?"


def test_forward_index_follows_forward_order():
    x = torch.randn(3, requires_grad=True)
    g = capture(x.sin().exp().sum())
    assert {n.name: n.forward_index for n in g.nodes if n.kind == "op"} == {
        "SinBackward0": 0,
        "ExpBackward0": 1,
        "SumBackward0": 2,
    }


def test_named_parameter_seen_only_through_detach_is_not_activation_memory():
    w = torch.randn(4, requires_grad=True)
    x = torch.randn(4, requires_grad=True)
    out = (x * w.detach()).sum()
    g = capture(out, params={"w": w, "x": x})
    (saved,) = [s for _, s in g.saved_tensors() if s.leaf_name == "w"]
    assert saved.name == "other" and g.activation_bytes() == 0 and g.saved_bytes() == 16


def test_custom_function_saving_its_output_goes_stale():
    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    x = torch.randn(3, requires_grad=True)
    y = Exp.apply(x)
    assert capture(y).stale == []
    y.mul_(2)
    ((node, saved),) = capture(y).stale
    assert (node.name, saved.name, saved.version_saved, saved.version_now) == ("ExpBackward", "saved_tensors[0]", 0, 1)
    with pytest.raises(RuntimeError, match="inplace"):
        y.sum().backward()


def test_outputs_that_feed_each_other_and_repeated_outputs():
    x = torch.randn(3, requires_grad=True)
    h = x.exp()
    y = h.sum()
    g = capture((h, y, y))
    assert [n.name for n in g.outputs] == ["output 0", "output 1", "output 2"]
    assert all(src < dst for src, dst in g.edges)  # still a valid gradient-flow order
    assert len(g.find("ExpBackward0")) == 1 and len(g.find("SumBackward0")) == 1


# --- layouts with no single storage: capture degrades, and says why --------------------------

csr_is_beta = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


@csr_is_beta
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_sparse_leaf_and_saved_sparse_tensor_are_captured_with_a_note(layout):
    dense = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    a = (dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()).requires_grad_()
    w = torch.randn(3, 2, requires_grad=True)
    out = (a @ w).sum() if layout == "csr" else torch.sparse.mm(a, w).sum()
    g = capture(out, params={"a": a, "w": w})  # raised "Cannot access storage of Sparse...TensorImpl"
    assert sorted(g.params_with_grad()) == ["a", "w"]
    (leaf_a,) = g.find("a")
    assert f"sparse {layout.upper()} tensor" in leaf_a.note and g.find("w")[0].note == ""
    ((node, saved),) = g.uncounted()
    # Its own size is its index and value tensors (3 non-zeros), not the 4 x 3 dense size.
    parts = (a.crow_indices(), a.col_indices(), a.values()) if layout == "csr" else (a._indices(), a._values())
    assert saved.nbytes == sum(t.numel() * t.element_size() for t in parts) and saved.storage is None
    assert f"sparse {layout.upper()} tensor" in saved.note and "not in the memory totals" in saved.note
    assert g.saved_bytes() == 4 * 3 * 2  # only w, counted once
    assert repr(g).endswith("; 1 not counted)")
    assert "not in the memory totals" in to_svg(g)  # the saved tensor's tooltip carries the note


def test_meta_tensors_have_no_memory_and_do_not_share_one_fake_storage():
    w = torch.randn(3, 2, device="meta", requires_grad=True)
    x = torch.randn(4, 3, device="meta")
    g = capture((x @ w).relu().sum(), params={"w": w})
    # Every meta storage has data_ptr 0: they used to be counted as one storage of 48 B.
    assert g.saved_bytes() == 0 and len(g.uncounted()) == 2
    assert all("meta tensor" in s.note and s.nbytes == 0 for _, s in g.uncounted())
    assert "meta tensor" in g.find("w")[0].note


@pytest.mark.filterwarnings("ignore:.*nested")
def test_nested_jagged_tensor_is_captured_without_storage_accounting():
    a = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=torch.jagged, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    g = capture((a @ w).relu().values().sum(), params={"a": a, "w": w})
    assert sorted(g.params_with_grad()) == ["a", "w"] and "nested tensor" in g.find("a")[0].note
    assert g.uncounted() and all("nested tensor" in s.note for _, s in g.uncounted())
    assert g.saved_bytes() == 4 * 3 * 2  # w only


def test_capture_after_backward_through_indexing_marks_the_saved_index_list_freed():
    w = torch.randn(5, 3, requires_grad=True)
    y = w[torch.tensor([0, 2])].sum()
    y.backward()
    index = next(n for n in capture(y, params={"w": w}).nodes if n.name == "IndexBackward0")
    assert [(s.name, s.state) for s in index.saved] == [("indices", "freed")]
