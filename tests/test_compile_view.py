"""CompileView (chapter 11): every setting draws what a fresh view draws, and no interaction compiles."""

import itertools
import logging
import time

import pytest

from autogradlab.models.compiled import MODELS, OPTIONS, compare
from autogradlab.views.common import BUG
from autogradlab.views.compile_view import CompileView


@pytest.fixture(scope="module")
def view():
    logging.disable(logging.WARNING)  # pytest's log capture would switch on torch's structured trace: slow
    try:
        yield CompileView()
    finally:
        logging.disable(logging.NOTSET)


def shown(v):
    return v.message.value, v.readout.value, v.picture.value


def test_every_setting_draws_what_a_fresh_view_draws_without_compiling(view):
    misses = compare.cache_info().misses
    for model, option in itertools.chain(itertools.product(MODELS, OPTIONS), [(MODELS[0], list(OPTIONS)[0])]):
        view.model_picker.value, view.option_picker.value = model, option
        assert BUG not in view.message.value and view.picture.value and view.readout.value
        assert shown(view) == shown(CompileView(view.comparisons, model=model, option=option))
    assert compare.cache_info().misses == misses  # the controls only look results up


def test_a_redraw_takes_well_under_100_ms(view):
    start = time.perf_counter()
    for option in [*OPTIONS] * 5:
        view.option_picker.value = option
    assert (time.perf_counter() - start) / (5 * len(OPTIONS)) < 0.1


def test_the_tables_show_what_the_chapter_measures(view):
    view.model_picker.value, view.option_picker.value = "mlp", "min-cut"
    text = view.readout.value + view.picture.value
    assert "84 KiB" in text and "36 KiB" in text and "TanhBackward0.result" in text and "tanh" in text
    view.option_picker.value = "default"
    assert "recomputed in backward</b> (0 ops" in view.picture.value


def test_a_missing_result_is_a_message_and_the_repr_is_short(view):
    small = CompileView({("mlp", "default"): compare("mlp", "default")}, model="mlp", option="default")
    assert repr(small) == "CompileView(model='mlp', option='default')"
    small.comparisons.clear()
    small.option_picker.value = "default"
    small._redraw()
    assert "No comparison" in small.message.value and small.picture.value == ""


def test_the_static_picture_carries_the_tables(view):
    bundle = view._repr_mimebundle_()
    assert "<table>" in bundle["text/html"]
