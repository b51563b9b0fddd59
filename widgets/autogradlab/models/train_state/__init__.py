"""The six pieces of state a training step moves, as snapshots you can compare (chapter 06's model).

A training step changes: the forward **graph**, the ``.grad`` buffers (**grad**), the
parameter values (**param**), the **optimizer** state, the module **mode**, and the
**rng** state. :func:`snapshot` records all six; :func:`describe` turns a snapshot
into table cells, marking the ones that differ from an earlier snapshot.

One module per job: ``state`` (capture and compare), ``table`` (the course's text),
``session`` (a ``train_step`` run line by line), ``resume`` (the exact-resume
experiment). Every name is importable from here.

>>> import torch
>>> model = torch.nn.Linear(2, 1)
>>> before = snapshot(model)
>>> model(torch.ones(1, 2)).sum().backward()
>>> changed_states(before, snapshot(model))
['grad']
"""

from autogradlab.models.train_state.resume import (
    RESUME_PARTS,
    ResumeReport,
    ResumeRow,
    _flat,
    _load_parts,
    _resume_run,
    _resume_train,
    _save_parts,
    describe_checkpoint,
    resume_experiment,
)
from autogradlab.models.train_state.session import LineTrace, StepSession, _graph_roots, small_setup, train_step
from autogradlab.models.train_state.state import (
    STATES,
    GraphStats,
    Snapshot,
    _optimizer_state,
    changed_states,
    graph_stats,
    module_mode,
    rng_fingerprint,
    snapshot,
)
from autogradlab.models.train_state.table import STATE_TITLES, Cell, describe, trace_table

__all__ = [
    "STATES",
    "STATE_TITLES",
    "GraphStats",
    "Snapshot",
    "Cell",
    "LineTrace",
    "StepSession",
    "ResumeRow",
    "ResumeReport",
    "RESUME_PARTS",
    "graph_stats",
    "snapshot",
    "changed_states",
    "describe",
    "module_mode",
    "rng_fingerprint",
    "train_step",
    "small_setup",
    "trace_table",
    "resume_experiment",
    "describe_checkpoint",
    # used by chapter 06's checkers and tests (the helpers an exercise must not call)
    "_optimizer_state",
    "_save_parts",
    "_load_parts",
    "_resume_run",
    "_resume_train",
    "_flat",
    "_graph_roots",
]
