"""Autograd Lab: the package the course notebooks run on.

Layers (lower never imports higher): graph capture -> rendering -> lab models
(``calculus``, ``device``, ...) -> ``widgets`` views -> ``checks`` -> ``release``.
"""

__version__ = "0.1.0"
