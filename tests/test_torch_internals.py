"""Every private torch internal the package relies on, named, and checked on the installed torch.

If a PyTorch upgrade renames or changes one of them, the test named after it fails here,
in one place. ``tests/test_one_home.py`` keeps private reads out of the rest of the package.
"""

from pathlib import Path

import pytest
import torch

from autogradlab import torch_internals as internals

PACKAGE = Path(__file__).resolve().parent.parent / "widgets" / "autogradlab"


# --------------------------------------------------------------------------- saved tensors


def test_saved_names_lists_a_builtin_nodes_saved_tensors():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    assert internals.saved_names((x * w).grad_fn) == ("other", "self")
    assert internals.saved_names(x.exp().grad_fn) == ("result",)
    assert internals.saved_names(x.sum().grad_fn) == ()


def test_raw_saved_is_a_savedtensor_with_data_unpack_and_unpack_hook():
    x = torch.randn(3, requires_grad=True)
    fn = x.exp().grad_fn
    raw = internals.raw_saved(fn, "result")
    assert type(raw).__name__ == "SavedTensor"
    assert internals.saved_unpack_hook(raw) is None
    assert internals.saved_data(raw).shape == (3,)
    assert torch.equal(internals.unpack_saved(fn, "result"), x.exp())
    # unpacking a saved *input* from the SavedTensor alone works (a saved output needs its node)
    y = x.sin()
    assert torch.equal(internals.unpack_raw(internals.raw_saved(y.grad_fn, "self")), x)


TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def test_savedtensor_unpack_is_offered_by_torch_2_13_not_2_11_and_unpack_raw_works_on_both():
    """torch 2.13 has SavedTensor.unpack; 2.11 (the floor) has not, and unpack_raw reads the stored tensor."""
    if TORCH >= (2, 13):
        assert internals.HAS_SAVED_UNPACK
    if TORCH <= (2, 11):
        assert not internals.HAS_SAVED_UNPACK
    a = torch.randn(5, 3, requires_grad=True)
    fn = (a * 1)[torch.tensor([0, 2])].grad_fn
    (index,) = internals.raw_saved(fn, "indices")
    assert torch.equal(internals.unpack_raw(index), torch.tensor([0, 2]))


def test_a_list_of_saved_tensors_is_a_list_of_savedtensors():
    a, b = torch.randn(2, requires_grad=True), torch.randn(3, requires_grad=True)
    fn = torch.cat([a, b]).grad_fn
    assert "tensors" not in internals.saved_names(fn) or isinstance(internals.raw_saved(fn, "tensors"), list)
    index = torch.tensor([0, 1])
    fn = torch.randn(4, 3, requires_grad=True)[index].grad_fn
    assert isinstance(internals.raw_saved(fn, "indices"), (list, tuple))


def test_unpacking_a_freed_saved_tensor_raises_and_data_is_none():
    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        internals.unpack_saved(y.grad_fn, "result")
    assert internals.saved_data(internals.raw_saved(y.grad_fn, "result")) is None


def test_unpacking_a_stale_saved_tensor_raises_with_both_versions_and_data_still_reads():
    x = torch.randn(3, requires_grad=True)
    h = x * 1.0
    y = h.sin()  # saves h
    h.add_(1)
    with pytest.raises(RuntimeError, match=r"is at version 1; expected version 0"):
        internals.unpack_saved(y.grad_fn, "self")
    assert internals.saved_data(internals.raw_saved(y.grad_fn, "self")) is h or torch.equal(
        internals.saved_data(internals.raw_saved(y.grad_fn, "self")), h
    )


def test_saved_tensors_hooks_set_the_unpack_hook():
    x = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = x.sin()
    assert internals.saved_unpack_hook(internals.raw_saved(y.grad_fn, "self")) is not None


def test_custom_function_saved_tensors_are_reachable_one_by_one():
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.randn(3, requires_grad=True)
    y = Double.apply(x)
    assert isinstance(y.grad_fn, torch.autograd.function.BackwardCFunction)
    assert internals.saved_names(y.grad_fn) == ()
    raw = internals.custom_raw_saved(y.grad_fn)
    assert len(raw) == 1 and internals.saved_data(raw[0]) is not None
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        internals.custom_raw_saved(y.grad_fn)


# --------------------------------------------------------------------------- nodes and tensors


def test_version_counts_in_place_changes():
    t = torch.zeros(2)
    assert internals.version(t) == 0
    t.add_(1)
    t[0] = 3
    assert internals.version(t) == 2
    assert internals.version(t.view(2)) == 2  # a view shares its base's counter


def test_sequence_nr_grows_with_creation_order():
    x = torch.randn(2, requires_grad=True)
    a = x.exp()
    b = a.sin()
    assert internals.sequence_nr(b.grad_fn) > internals.sequence_nr(a.grad_fn)


def test_input_metadata_has_one_entry_per_forward_output_with_shape_and_dtype():
    x = torch.randn(4, 3, requires_grad=True)
    meta = internals.input_metadata(x.exp().grad_fn)
    assert len(meta) == 1 and tuple(meta[0].shape) == (4, 3) and meta[0].dtype == torch.float32
    assert len(internals.input_metadata(x.unbind(0)[0].grad_fn)) == 4


# --------------------------------------------------------------------------- modes


def test_torch_dispatch_mode_sees_aten_ops_and_tree_leaves_flattens():
    seen = []

    class Log(internals.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Log():
        torch.ones(2) + 1
    assert any("add" in name for name in seen)
    assert internals.tree_leaves(((1, [2]), {"a": 3})) == [1, 2, 3]


def test_aten_to_copy_is_the_op_a_dtype_cast_and_autocast_run():
    seen = []

    class Log(internals.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Log():
        torch.ones(2).to(torch.float16)
        torch.ones(2) + 1
    assert seen.count(internals.ATEN_TO_COPY) == 1


def test_torch_function_mode_sees_torch_functions():
    seen = []

    class Log(internals.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Log():
        torch.nn.functional.softplus(torch.ones(2))
    assert "softplus" in seen


# --------------------------------------------------------------------------- entry points


def test_functorch_transforms_enter_the_two_nesting_context_managers():
    module, names = internals.functorch_transform_entry_points()
    for name in names:
        assert callable(getattr(module, name))
    entered = []
    originals = {name: getattr(module, name) for name in names}

    def spy(name):
        def enter(*args, **kwargs):
            entered.append(name)
            return originals[name](*args, **kwargs)

        return enter

    try:
        for name in names:
            setattr(module, name, spy(name))
        torch.func.grad(lambda t: t.sin().sum())(torch.ones(2))
        torch.func.jvp(lambda t: t.sin(), (torch.ones(2),), (torch.ones(2),))
    finally:
        for name, original in originals.items():
            setattr(module, name, original)
    assert entered == list(names)


def test_all_three_engine_patch_points_exist_and_backward_goes_through_them():
    points = internals.engine_patch_points()
    assert [(getattr(owner, "__name__", ""), attr) for owner, attr in points] == [
        ("torch.autograd", "_engine_run_backward"),
        ("torch.autograd.graph", "_engine_run_backward"),
        ("Variable", "_execution_engine"),
    ]
    engine = internals.execution_engine()
    assert hasattr(engine, "run_backward")
    calls = []
    original = torch.autograd._engine_run_backward

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch.autograd._engine_run_backward = spy
    try:
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        torch.autograd.grad((x * 2).sum(), x)
    finally:
        torch.autograd._engine_run_backward = original
    assert calls == [1, 1]


# --------------------------------------------------------------------------- state_dict keys


def test_private_state_dict_keys():
    scaler = torch.amp.GradScaler("cpu")
    assert internals.SCALER_GROWTH_TRACKER_KEY in scaler.state_dict() or not scaler.is_enabled()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    assert internals.SCHEDULER_LAST_LR_KEY in sched.state_dict()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert internals.SCALER_GROWTH_TRACKER_KEY in scaler.state_dict()


# --------------------------------------------------------------------------- GradScaler (the doctor's clip check)


def test_scaler_started_and_stage_follow_one_iteration_without_adding_entries():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    assert not internals.scaler_started(scaler) and internals.scaler_stage(scaler, opt) == "READY"
    assert not scaler._per_optimizer_states  # reading added no entry
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    assert internals.scaler_started(scaler) and internals.scaler_stage(scaler, opt) == "READY"
    scaler.unscale_(opt)
    assert internals.scaler_stage(scaler, opt) == "UNSCALED"
    scaler.step(opt)
    assert internals.scaler_stage(scaler, opt) == "STEPPED"
    scaler.update()
    assert internals.scaler_stage(scaler, opt) == "READY"


# --------------------------------------------------------------------------- torch.compile (chapter 11)


def test_explain_lists_graph_breaks_with_reason_and_user_line():
    def step(x):
        y = x.sin()
        if y.sum().item() > 0:
            y = y * 2
        return y.cos()

    torch.compiler.reset()
    report = internals.explain(step, torch.ones(3))
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    (reason,) = report.break_reasons
    assert "Tensor.item()" in reason.reason.splitlines()[0]
    frame = reason.user_stack[-1]
    assert frame.filename == __file__ and "item()" in frame.line and frame.lineno > 0
    torch.compiler.reset()


def test_compiled_autograd_hands_the_whole_backward_to_the_compiler_as_one_graph():
    graphs = []

    def keep(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    w = torch.ones(3, requires_grad=True)
    h = w.sin()
    h.register_hook(lambda g: 2 * g)
    with internals.compiled_autograd(torch.compile(backend=keep)):
        (h * h).sum().backward()
    assert len(graphs) == 1
    assert torch.allclose(w.grad, 2 * 2 * w.sin().detach() * w.cos().detach())
    torch.compiler.reset()


def test_inductor_decompositions_split_gelu_into_pointwise_ops():
    table = internals.inductor_decompositions()
    assert torch.ops.aten.gelu.default in table and torch.ops.aten.gelu_backward.default in table
    x = torch.randn(5)
    assert torch.allclose(table[torch.ops.aten.gelu.default](x), torch.nn.functional.gelu(x))


def test_attention_kernels_include_the_one_sdpa_runs_here():
    seen = []

    class Log(internals.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    q = torch.randn(1, 2, 4, 8)
    with Log():
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert len(internals.attention_kernels()) >= 3
    assert [op for op in seen if op in internals.attention_kernels()], seen
