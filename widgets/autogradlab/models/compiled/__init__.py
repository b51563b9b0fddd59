"""What ``torch.compile`` does to autograd, measured (chapter 11): capture, the joint graph, the partition.

* :mod:`~autogradlab.models.compiled.record`: recording backends (Dynamo's graphs, AOTAutograd's
  forward and backward graphs under the default or the min-cut partitioner), :func:`quiet`;
* :mod:`~autogradlab.models.compiled.breaks`: graph breaks as data (:func:`graph_breaks`);
* :mod:`~autogradlab.models.compiled.partition`: what a compiled forward saves and its backward
  recomputes (:func:`read_partition`), FLOPs read from the graphs;
* :mod:`~autogradlab.models.compiled.course_models`: the chapter's models and selective-checkpoint policies;
* :mod:`~autogradlab.models.compiled.side_by_side`: eager vs compiled for a model, cached (:func:`compare`);
* :mod:`~autogradlab.models.compiled.tools`: earlier chapters' debugging tools on compiled code;
* :mod:`~autogradlab.models.compiled.exercises`: the material of the chapter's exercises.

>>> import torch
>>> f, rec = compile_recorded(lambda x: (x * 2).sum(), partition="default")
>>> f(torch.ones(2, requires_grad=True)).backward()
>>> read_partition(rec).saved
()
"""

from autogradlab.models.compiled.breaks import Break, Capture, graph_breaks
from autogradlab.models.compiled.course_models import (
    MATMULS,
    MODELS,
    GeluMLP,
    build,
    mlp_stack,
    new_gelu,
    save_only,
    with_policy,
)
from autogradlab.models.compiled.partition import (
    Partition,
    SavedValue,
    base_of,
    graph_flops,
    read_partition,
    recomputed_nodes,
    saved_values,
)
from autogradlab.models.compiled.record import (
    PARTITIONERS,
    Recording,
    compile_recorded,
    op_names,
    quiet,
    recording_backend,
)
from autogradlab.models.compiled.side_by_side import OPTIONS, Comparison, EagerSaved, compare, eager_side
from autogradlab.models.compiled.tools import anomaly_report

__all__ = [
    "MATMULS",
    "MODELS",
    "OPTIONS",
    "PARTITIONERS",
    "Break",
    "Capture",
    "Comparison",
    "EagerSaved",
    "GeluMLP",
    "Partition",
    "Recording",
    "SavedValue",
    "anomaly_report",
    "base_of",
    "build",
    "compare",
    "compile_recorded",
    "eager_side",
    "graph_breaks",
    "graph_flops",
    "mlp_stack",
    "new_gelu",
    "op_names",
    "quiet",
    "read_partition",
    "recomputed_nodes",
    "recording_backend",
    "save_only",
    "saved_values",
    "with_policy",
]
