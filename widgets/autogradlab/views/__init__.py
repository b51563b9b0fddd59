"""ipywidgets views. A view composes controls and a picture and calls a model; no computation lives here.

Views are imported lazily (``from autogradlab.views import GraphView`` loads only
that module), so a chapter pays only for the views it uses.
"""

from importlib import import_module

_VIEWS = {
    "TangentExplorer": "tangent",
    "GraphView": "graph_view",
    "VJPExplorer": "vjp_explorer",
    "TrainStepInspector": "train_step_inspector",
    "AccumulationLab": "accumulation_lab",
    "LossScaleLab": "loss_scale_lab",
    "CompileView": "compile_view",
}

__all__ = list(_VIEWS)


def __getattr__(name: str):
    if name not in _VIEWS:
        raise AttributeError(f"module 'autogradlab.views' has no attribute {name!r}")
    return getattr(import_module(f"autogradlab.views.{_VIEWS[name]}"), name)
