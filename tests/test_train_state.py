"""train_state: snapshots of the six states, their diff, graph statistics and the line-by-line session."""

import pytest
import torch

from autogradlab.models import train_state
from autogradlab.models.train_state import (
    STATES,
    StepSession,
    changed_states,
    describe,
    graph_stats,
    module_mode,
    rng_fingerprint,
    small_setup,
    snapshot,
    trace_table,
    train_step,
)


def test_graph_stats_counts_nodes_and_saved_bytes_then_sees_them_freed():
    x = torch.ones(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.float64))
    loss = (x @ w).tanh().sum()
    alive = graph_stats([loss], parameters=[w])
    # tanh saves its result (4x2 float64 = 64 B); mm saves x (96 B) and w (a parameter: not counted).
    assert alive.nodes == 5 and alive.saved_bytes == 64 + 96 and alive.freed == 0
    loss.backward()
    freed = graph_stats([loss], parameters=[w])
    assert freed.nodes == 5 and freed.saved_bytes == 0 and freed.freed > 0
    assert str(freed).startswith("freed: 5 nodes")


def test_graph_stats_ignores_non_tensors_and_leaves_and_is_iterative():
    x = torch.ones(2, requires_grad=True)
    y = x
    for _ in range(5000):  # deep chain: recursion would overflow
        y = y * 1.0
    stats = graph_stats([1.5, "text", torch.ones(2), y])
    assert stats.nodes == 5001 and str(graph_stats([])) == "none"


def test_graph_stats_counts_a_shared_storage_once():
    x = torch.ones(8, requires_grad=True)
    a = x.exp()
    stats = graph_stats([a * a])  # a is saved twice by mul, and once as exp's result
    assert stats.saved_bytes == 32


def test_rng_fingerprint_tracks_generator_state():
    torch.manual_seed(3)
    a = rng_fingerprint()
    torch.rand(1)
    b = rng_fingerprint()
    torch.manual_seed(3)
    assert a != b and rng_fingerprint() == a and len(a) == 8


def test_module_mode_train_eval_mixed():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout())
    assert module_mode(model) == "train"
    model.eval()
    assert module_mode(model) == "eval"
    model[1].train()
    assert module_mode(model) == "mixed: 1 of 3 modules in train"


def test_each_state_change_is_detected_alone():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    s0 = snapshot(model, opt)
    loss = model(torch.randn(4, 3)).pow(2).sum()
    s1 = snapshot(model, opt, [loss])
    assert changed_states(s0, s1) == ["graph", "rng"]  # randn advanced the RNG
    loss.backward()
    s2 = snapshot(model, opt, [loss])
    assert changed_states(s1, s2) == ["graph", "grad"]
    opt.step()
    s3 = snapshot(model, opt, [loss])
    assert changed_states(s2, s3) == ["param", "optimizer"]
    model.eval()
    assert changed_states(s3, snapshot(model, opt, [loss])) == ["mode"]
    assert changed_states(s3, s3) == []


def test_describe_marks_changed_cells_and_names_optimizer_coverage():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    before = snapshot(model, opt)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    cells = {(c.state, c.item): c for c in describe(snapshot(model, opt), before)}
    assert cells[("optimizer", "1.weight")].text == "not in optimizer"
    assert cells[("optimizer", "0.weight")].text.startswith("‖momentum_buffer‖")
    assert cells[("param", "0.weight")].changed and "Δ" in cells[("param", "0.weight")].text
    assert not cells[("param", "1.weight")].changed  # got a gradient but never moves
    assert cells[("grad", "1.weight")].changed
    assert all(not c.changed for c in describe(before))


def test_frozen_parameter_is_labelled():
    model = torch.nn.Linear(2, 1)
    model.bias.requires_grad_(False)
    texts = {(c.state, c.item): c.text for c in describe(snapshot(model))}
    assert texts[("param", "bias")].endswith("frozen") and texts[("optimizer", "bias")] == "not in optimizer"


def test_snapshot_rejects_non_modules():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        snapshot(torch.ones(2))


def test_default_session_shows_what_each_line_of_train_step_changes():
    session = StepSession()
    history = session.run()
    changed = {t.source.split("(")[0].split(" =")[0]: t.changed for t in history}
    assert changed["model.train"] == ["mode"]
    assert changed["inputs, targets"] == []
    assert changed["optimizer.zero_grad"] == ["grad"]
    assert changed["outputs"] == ["graph", "rng"]  # dropout draws random numbers in train mode
    assert changed["loss.backward"] == ["graph", "grad"]
    assert changed["optimizer.step"] == ["param", "optimizer"]
    assert session.done and session.error is None
    assert session.stepper.returned.grad_fn is None
    table = trace_table(history)
    assert table.splitlines()[0].split("|")[1].strip() == "graph" and len(table.splitlines()) == 11


def test_session_reset_is_reproducible():
    session = StepSession()
    first = [c.text for c in (session.run(), session.cells())[1]]
    session.reset()
    session.run()
    assert [c.text for c in session.cells()] == first


def test_session_equals_a_plain_call_of_train_step():
    session = StepSession()
    session.run()
    objects = small_setup()
    loss = train_step(**objects)
    assert torch.equal(loss, session.stepper.returned)
    for p, q in zip(objects["model"].parameters(), session.model.parameters()):
        assert torch.equal(p, q)


def learner_step_with_bug(model, batch, optimizer, loss_fn):
    optimizer.zero_grad()
    outputs = model(batch[0])
    loss = loss_fn(outputs, batch[1].T)  # wrong shape
    loss.backward()


@pytest.mark.filterwarnings("ignore:Using a target size")
def test_learner_error_is_reported_with_the_line_and_stops():
    session = StepSession(learner_step_with_bug)
    history = session.run()
    assert len(history) == 3 and session.done
    assert "line 4 of learner_step_with_bug" in session.error and "batch[1].T" in session.error
    assert history[-1].error == session.error
    assert "✗ line 4" in trace_table(history)
    with pytest.raises(StopIteration):
        session.next()


def test_setup_without_model_is_a_clear_error():
    with pytest.raises(ValueError, match="'model'"):
        StepSession(setup=lambda: {"batch": None})


def test_states_order_is_the_documented_one():
    assert STATES == ("graph", "grad", "param", "optimizer", "mode", "rng")


def test_graph_stats_calls_a_saved_tensor_changed_in_place_stale_not_freed():
    lin = torch.nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    loss = lin(x).pow(2).sum()
    loss.backward(retain_graph=True)
    assert graph_stats([loss], lin.parameters()).stale == 0
    with torch.no_grad():
        lin.weight.add_(1.0)  # what optimizer.step() does: the weight saved by addmm is now stale
    stats = graph_stats([loss], lin.parameters())
    assert stats.stale == 1 and stats.freed == 0 and str(stats).endswith(", 1 stale")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def retain_then_step(model, batch, optimizer, loss_fn):
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward(retain_graph=True)
    optimizer.step()
    loss.backward()


def test_a_second_backward_after_the_step_fails_on_the_version_check_even_with_retain_graph():
    session = StepSession(retain_then_step)
    history = session.run()
    assert history[2].changed == ["graph", "param", "optimizer"]  # step made a saved weight stale
    assert "modified by an inplace operation" in session.error


def test_resume_experiment_is_exact_only_with_every_part_and_leaves_the_global_rng_alone():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    report = train_state.resume_experiment(total=8, stop=5)  # stops inside the first epoch
    assert torch.equal(before, torch.get_rng_state())
    assert [row.parts for row in report.rows][-1] == train_state.RESUME_PARTS
    assert [row.exact for row in report.rows] == [False] * 5 + [True]
    assert report.rows[-1].max_diff == 0.0 and report.rows[-1].scale == report.scale
    assert report.scaler_changes_nothing


def test_the_experiments_checkpoint_loads_twice_exactly():
    """Training after a load must not change the checkpoint (torch.load makes new tensors each time)."""
    with torch.random.fork_rng(devices=[]):
        target = train_state._resume_run(0)
        train_state._resume_train(target, 9)
        run = train_state._resume_run(0)
        train_state._resume_train(run, 7)
        blob = train_state._save_parts(run, train_state.RESUME_PARTS)
        finals = []
        for seed in (1, 2):
            fresh = train_state._resume_run(seed)
            train_state._load_parts(blob, fresh)
            train_state._resume_train(fresh, 2)
            finals.append(train_state._flat(fresh["model"]))
    assert all(torch.equal(f, train_state._flat(target["model"])) for f in finals)


def test_describe_checkpoint_names_every_part_with_binary_sizes():
    text = train_state.describe_checkpoint(train_state.resume_experiment(total=3, stop=2).checkpoint)
    lines = text.splitlines()
    assert [line.split("|")[0].strip() for line in lines[1:]] == list(train_state.RESUME_PARTS)
    assert "KiB" in text and " kB" not in text
    # the RNG part names the CUDA generators it saved: none on a CPU machine (seen failing on a GPU when it assumed that)
    cuda = f"{torch.cuda.device_count()} CUDA generator(s)" if torch.cuda.is_available() else "no CUDA generator"
    assert cuda in text


def test_graph_stats_is_graph_capture_seen_as_totals():
    """One walker: graph_stats counts what autogradlab.graph.capture reports, nothing of its own."""
    from autogradlab.graph import capture

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    loss = model(torch.randn(16, 4)).pow(2).mean()
    graph = capture(loss, params=model)
    stats = graph_stats([loss], model.parameters())
    assert stats.nodes == sum(1 for n in graph.nodes if n.kind != "output")
    assert stats.saved_bytes == graph.activation_bytes() > 0


def test_graph_stats_counts_what_a_custom_function_saved():
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.ones(5, requires_grad=True)
    stats = graph_stats([Double.apply(x).sum()])  # x: 20 B that ctx.save_for_backward kept
    assert stats.saved_bytes == 20


def test_graph_stats_after_backward_through_indexing_is_freed():
    w = torch.randn(5, 3, requires_grad=True)
    y = w[torch.tensor([0, 2])].exp().sum()
    y.backward()
    stats = graph_stats([y], [w])
    assert (stats.freed, stats.saved_bytes, str(stats)) == (2, 0, "freed: 4 nodes, 0 B saved")
