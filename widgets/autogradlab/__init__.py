"""Autograd Lab: the package the course notebooks run on.

Layers (lower never imports higher; ``tests/test_layers.py`` enforces it):
base (the top-level modules: ``device``, ``units``) -> ``graph`` (capture) ->
``render`` -> ``models`` (the labs' computations) -> ``views`` (ipywidgets) ->
``checks`` -> ``release``.
"""

__version__ = "0.1.0"
