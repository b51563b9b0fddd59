"""ipywidgets views. A view composes controls and a picture and calls a model; no computation lives here."""

from autogradlab.widgets.tangent import TangentExplorer

__all__ = ["TangentExplorer"]
