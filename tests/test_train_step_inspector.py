"""TrainStepInspector: buttons drive the session, changed cells are highlighted, errors stay in the view."""

import pytest

from autogradlab.views import TrainStepInspector
from autogradlab.views.train_step_inspector import _CHANGED


def test_initial_view_and_repr():
    view = TrainStepInspector()
    assert repr(view) == "TrainStepInspector(step='train_step', line=0/9)"
    assert "Before the first line" in view.status.value
    assert _CHANGED not in view.table.value and "hidden.weight" in view.table.value


def test_next_line_highlights_what_changed():
    view = TrainStepInspector()
    view.next_button.click()
    assert "module mode" in view.status.value and view.table.value.count(_CHANGED) == 1
    for _ in range(3):
        view.next_button.click()  # ... outputs = model(inputs)
    assert "forward graph, RNG state" in view.status.value
    assert repr(view) == "TrainStepInspector(step='train_step', line=4/9)"


def test_run_to_end_then_reset():
    view = TrainStepInspector()
    view.run_button.click()
    assert view.next_button.disabled and view.run_button.disabled
    assert "step finished" in view.status.value
    view.reset_button.click()
    assert not view.next_button.disabled and "Before the first line" in view.status.value


def buggy_step(model, batch, optimizer, loss_fn):
    optimizer.zero_grad()
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    loss.backward()  # the graph was freed by the first backward


def test_learner_error_is_shown_with_its_line():
    view = TrainStepInspector(buggy_step)
    view.run_button.click()
    assert "line 5 of buggy_step" in view.status.value and "RuntimeError" in view.status.value
    assert "#ffcdd2" in view.listing.value and view.next_button.disabled


@pytest.mark.parametrize("bad", [print, lambda model: model])
def test_unusable_step_is_a_message_not_a_traceback(bad):
    view = TrainStepInspector(bad)
    assert "Cannot step through" in view.status.value and view.next_button.disabled
    view.run_button.click()  # does nothing, raises nothing
    assert view.session is None and "line=0/0" in repr(view)
