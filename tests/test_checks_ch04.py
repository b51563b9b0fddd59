"""Chapter 04 checkers: right answers pass; typical wrong ones are rejected with the hint that names the mistake."""

import pytest
import torch

from autogradlab.checks.ch04 import (
    check_ema,
    check_inplace_chain,
    check_saved_activation_bytes,
    inplace_saves_memory,
    measured_activation_storages,
)
from autogradlab.checks.core import ExerciseError
from autogradlab.models.fixtures import make_mlp


def item(dtype):
    return torch.empty((), dtype=dtype).element_size()


def rejected(call, mistake, kind=None):
    """The check raises, names ``mistake`` (and ``kind`` when given), and gives a hint."""
    with pytest.raises(ExerciseError) as info:
        call()
    error = info.value
    assert error.mistake == mistake and error.hint, (error.kind, error.mistake, str(error))
    assert kind is None or error.kind == kind, error.kind


# --- Exercise 1 ------------------------------------------------------------------------------


def right(b, sizes, dtype, activation):
    per = 2 if activation == "gelu" else 1
    i = item(dtype)
    return [b * sizes[0] * i] + [b * n * i for n in sizes[1:-1] for _ in range(per)] + [b * sizes[-1] * i]


def right_by_walking_layers(b, sizes, dtype, activation):
    """An alternative: walk the layers, note each new storage."""
    i, out = item(dtype), []
    out.append(b * sizes[0] * i)  # first Linear's input
    for n in sizes[1:-1]:
        if activation == "gelu":
            out.append(b * n * i)  # GELU's input
        out.append(b * n * i)  # activation output = next Linear's input
    out.append(b * sizes[-1] * i)  # pow's input
    return tuple(out)


def test_the_measurement_itself_sees_gelu_save_its_input():
    relu = measured_activation_storages(2, [3, 4, 5], torch.float32, "relu")
    gelu = measured_activation_storages(2, [3, 4, 5], torch.float32, "gelu")
    assert relu == [24, 32, 40] and gelu == [24, 32, 32, 40]
    assert isinstance(make_mlp([3, 4, 5], activation="tanh")[1], torch.nn.Tanh)


@pytest.mark.parametrize("answer", [right, right_by_walking_layers, lambda *a: torch.tensor(right(*a))])
def test_right_activation_storages_pass(answer, capsys):
    check_saved_activation_bytes(answer)
    assert capsys.readouterr().out.startswith("✓")


def measured_inside(b, sizes, dtype, activation):
    """Cell 7 pasted into the answer: run a real make_mlp and measure it with hooks (errata §5a)."""
    saved = {}
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}[activation]
    layers = [m for i, o in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(i, o, dtype=dtype), act())][:-1]
    model = torch.nn.Sequential(*layers)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(b, sizes[0], dtype=dtype)).pow(2).mean()
    return list(saved.values())


def measured_with_course_code(b, sizes, dtype, activation):
    from autogradlab.checks.ch04 import measured_activation_storages

    return measured_activation_storages(b, sizes, dtype, activation)


def measured_by_reading_the_graph(b, sizes, dtype, activation):
    """No hooks: run the model and read the saved tensors off the graph (there is none to read: inference mode)."""
    from autogradlab.graph import capture

    model = torch.nn.Sequential(*[torch.nn.Linear(i, o, dtype=dtype) for i, o in zip(sizes, sizes[1:])])
    graph = capture(model(torch.randn(b, sizes[0], dtype=dtype)).pow(2).mean())
    return [s.nbytes for n in graph.nodes for s in n.saved]


WRONG_STORAGES = {
    "the old total": (lambda b, s, d, a: sum(right(b, s, d, a)), "total"),
    "GELU like ReLU": (lambda b, s, d, a: right(b, s, d, "relu"), "gelu-like-relu"),
    "every activation like GELU": (lambda b, s, d, a: right(b, s, d, "gelu"), "relu-like-gelu"),
    "no input": (lambda b, s, d, a: right(b, s, d, a)[1:], "no-input"),
    "no output": (lambda b, s, d, a: right(b, s, d, a)[:-1], "no-output"),
    "elements": (lambda b, s, d, a: [n // item(d) for n in right(b, s, d, a)], "elements"),
    "always 4 bytes": (lambda b, s, d, a: [n // item(d) * 4 for n in right(b, s, d, a)], "always-4-bytes"),
    "per example": (lambda b, s, d, a: [n // b for n in right(b, s, d, a)], "per-example"),
    "reordered": (lambda b, s, d, a: list(reversed(right(b, s, d, a))), "same-total"),
    "measures with hooks inside": (measured_inside, "`saved_tensors_hooks`"),
    "calls the course's measurement": (measured_with_course_code, "`saved_tensors_hooks`"),
}


@pytest.mark.parametrize("name", WRONG_STORAGES)
def test_wrong_activation_storages_are_named(name):
    answer, mistake = WRONG_STORAGES[name]
    rejected(lambda: check_saved_activation_bytes(answer), mistake)


def test_reading_the_graph_inside_the_answer_finds_no_graph():
    with pytest.raises(ExerciseError) as info:
        check_saved_activation_bytes(measured_by_reading_the_graph)
    assert info.value.kind == "off-limits" and info.value.hint
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


# --- Exercise 2 ------------------------------------------------------------------------------


def optimal(h):
    h = h.sin()
    h.mul_(3)
    h.exp_()
    h = h + 1
    h.tanh_()
    h = h / 2
    h = h**2
    return h.sub_(0.5)


def optimal_other_spelling(h):
    h = torch.sin(h)
    h *= 3
    torch.exp_(h)
    h = torch.add(h, 1)
    torch.tanh_(h)
    h = torch.div(h, 2)
    h = torch.square(h)
    h -= 0.5
    return h


# The optimal chain step by step; a wrong answer replaces one step (chain_with(div=...)).
OPTIMAL_STEPS = {
    "sin": lambda h: h.sin(),
    "mul": lambda h: h.mul_(3),
    "exp": lambda h: h.exp_(),
    "add": lambda h: h + 1,
    "tanh": lambda h: h.tanh_(),
    "div": lambda h: h / 2,
    "pow": lambda h: h**2,
    "sub": lambda h: h.sub_(0.5),
}


def chain_with(**changed):
    def answer(h):
        for step in {**OPTIMAL_STEPS, **changed}.values():
            h = step(h)
        return h

    return answer


def test_the_rule_gives_four_in_place_steps():
    assert [n for n, ok in inplace_saves_memory().items() if ok] == ["mul", "exp", "tanh", "sub"]


@pytest.mark.parametrize("answer", [optimal, optimal_other_spelling, chain_with()])
def test_optimal_chains_pass(answer, capsys):
    check_inplace_chain(answer)
    assert "allocates 4 new tensors for 8 steps" in capsys.readouterr().out


def all_out_of_place(h):
    return ((((h.sin() * 3).exp() + 1).tanh() / 2) ** 2) - 0.5


def under_no_grad(h):
    with torch.no_grad():
        return optimal(h)


WRONG_CHAINS = {
    "nothing in place": (all_out_of_place, "missed-in-place"),
    "add_ after exp": (chain_with(add=lambda h: h.add_(1)), "add-overwrites-saved"),
    "div_ after tanh": (chain_with(div=lambda h: h.div_(2)), "div-overwrites-saved"),
    "sin_ on the caller's h": (chain_with(sin=lambda h: h.sin_()), None),
    ".data (tanh saved this output: no error, a wrong gradient)": (
        chain_with(div=lambda h: (h.data.div_(2), h)[1]),
        "data",
    ),
    ".data.add_ then tanh_ (errata §5c)": (chain_with(add=lambda h: (h.data.add_(1), h)[1]), "data"),
    "detach().div_ (errata §5c)": (chain_with(div=lambda h: (h.detach().div_(2), h)[1]), "detach"),
    "pow_ in place (errata §5a)": (chain_with(pow=lambda h: h.pow_(2)), "in-place-saves-nothing"),
    "sin_ on a clone": (chain_with(sin=lambda h: h.clone().sin_()), "in-place-saves-nothing"),
    "an extra copy": (chain_with(sin=lambda h: h.clone().sin()), "extra-copy"),
    "a step missing": (chain_with(div=lambda h: h), None),
    "no graph": (under_no_grad, "no_graph"),
}


@pytest.mark.parametrize("name", WRONG_CHAINS)
def test_wrong_chains_are_named(name):
    answer, mistake = WRONG_CHAINS[name]
    with pytest.raises(ExerciseError) as info:
        check_inplace_chain(answer)
    assert info.value.mistake == mistake, (info.value.kind, info.value.mistake, str(info.value))
    kinds = {"sin_ on the caller's h": "changed-input", "a step missing": "value"}  # named by kind, not by a slip
    assert info.value.kind == kinds.get(name, info.value.kind) and (info.value.hint or name == "a step missing")


# --- Exercise 3 ------------------------------------------------------------------------------


def init_right(model):
    params = dict(model.named_parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params.values()])
    return {
        n: piece.view(p.shape)
        for (n, p), piece in zip(params.items(), flat.split([p.numel() for p in params.values()]))
    }


def init_empty_and_copy(model):
    """An alternative: one torch.empty buffer, each slice copied into as a view."""
    params = list(model.named_parameters())
    flat = torch.empty(sum(p.numel() for _, p in params))
    ema, start = {}, 0
    for name, p in params:
        ema[name] = flat[start : start + p.numel()].view_as(p)
        ema[name].copy_(p.detach())
        start += p.numel()
    return ema


def init_parameters_to_vector(model):
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    out, start = {}, 0
    for name, p in model.named_parameters():
        out[name] = flat[start : start + p.numel()].reshape(p.shape)
        start += p.numel()
    return out


def update_right(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(decay).add_(p, alpha=1 - decay)


def update_lerp(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].lerp_(p, 1 - decay)


def update_foreach(ema, model, decay):
    names = [n for n, _ in model.named_parameters()]
    with torch.no_grad():
        torch._foreach_lerp_([ema[n] for n in names], [p for _, p in model.named_parameters()], 1 - decay)


@pytest.mark.parametrize(
    "init, update",
    [(init_right, update_right), (init_empty_and_copy, update_lerp), (init_parameters_to_vector, update_foreach)],
)
def test_right_ema_passes(init, update, capsys):
    check_ema(init, update)
    assert capsys.readouterr().out.startswith("✓")


def update_data(ema, model, decay):
    for name, p in model.named_parameters():
        ema[name].data.mul_(decay).add_(p.data, alpha=1 - decay)


def update_rebinds(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name] = decay * ema[name] + (1 - decay) * p


def update_swapped(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(1 - decay).add_(p, alpha=decay)


def update_moves_the_model(ema, model, decay):
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(decay).add_(p, alpha=1 - decay)
            p.copy_(ema[name])


def update_a_cat_copy(ema, model, decay):
    with torch.no_grad():
        flat = torch.cat([e.reshape(-1) for e in ema.values()])  # a new tensor, not the buffer
        flat.lerp_(torch.cat([p.reshape(-1) for p in model.parameters()]), 1 - decay)


def update_without_no_grad(ema, model, decay):
    for name, p in model.named_parameters():
        ema[name].mul_(decay).add_(p, alpha=1 - decay)


WRONG_EMA = {
    "aliased by detach": (lambda m: {n: p.detach() for n, p in m.named_parameters()}, update_right, "shares-model"),
    "one clone per parameter": (
        lambda m: {n: p.detach().clone() for n, p in m.named_parameters()},
        update_right,
        "separate-storages",
    ),
    "the buffer stays in the graph": (
        lambda m: {n: p.clone() for n, p in m.named_parameters()},
        update_right,
        "in-graph",
    ),
    "split without the shape": (lambda m: {n: v.reshape(-1) for n, v in init_right(m).items()}, update_right, "values"),
    "update through .data": (init_right, update_data, "through-data"),
    "rebinds the dict entries": (init_right, update_rebinds, "replaced"),
    "decay swapped": (init_right, update_swapped, "decay-swapped"),
    "writes the average into the model": (init_right, update_moves_the_model, "moved-model"),
    "updates a torch.cat copy": (init_right, update_a_cat_copy, "updated-a-copy"),
    "update records a graph": (init_right, update_without_no_grad, None),  # PyTorch raises: a hint explains it
    "a list, not a dict": (lambda m: [p.detach().clone() for p in m.parameters()], update_right, "not-a-dict"),
}


@pytest.mark.parametrize("name", WRONG_EMA)
def test_wrong_ema_is_named(name):
    init, update, mistake = WRONG_EMA[name]
    rejected(lambda: check_ema(init, update), mistake)


def test_a_wrong_chain_is_explained_in_chinese(monkeypatch):
    monkeypatch.setenv("AUTOGRADLAB_LANG", "zh")
    with pytest.raises(ExerciseError) as info:
        check_inplace_chain(WRONG_CHAINS["add_ after exp"][0])
    assert (info.value.kind, info.value.mistake) == ("contract", "add-overwrites-saved")
    assert "经过 `chain_inplace` 的 backward 失败" in str(info.value) and "提示：前一步 `exp`" in str(info.value)
