"""Models: the computations behind the labs, each a plain module with no ipywidgets import.

Layer 3 of the package (graph -> render -> models -> views -> checks -> release):
views draw what these compute, checkers compare against them, and every model is
testable in plain pytest.
"""
