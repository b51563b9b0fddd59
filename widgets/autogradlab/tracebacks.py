"""Reading an exception the learner's code raised: which line is theirs, and what the message means.

Two jobs that the checkers, the line-by-line stepper and the doctor share:

* :func:`learner_frames` keeps the traceback frames of the learner's own code: not this
  package, not torch, not the standard library or another installed package.
* :data:`ERROR_KINDS` recognises PyTorch's (and Python's) error messages by their text,
  the only thing these errors carry; :func:`hint_for` maps a message to a caller's hint
  by kind. ``tests/test_tracebacks.py`` raises each one on the installed torch, so a
  reworded message fails there, in one place.

>>> error = RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
>>> error_kind(error)
'no_graph'
>>> hint_for(error, {"freed": "keep the graph", "no_graph": "the forward ran without autograd"})
'the forward ran without autograd'
"""

from __future__ import annotations

import linecache
import os
import re
import sysconfig
import traceback
from collections.abc import Iterable, Mapping

import torch

# --------------------------------------------------------------------------- the learner's line

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_DIRS = tuple(
    sorted(
        {
            os.path.abspath(p)
            for p in (
                _PACKAGE_DIR,
                os.path.dirname(os.path.abspath(torch.__file__)),
                *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
            )
        }
    )
)
_LIBRARY_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def is_library(filename: str) -> bool:
    """Whether a traceback frame's file is library code (this package, torch, Python, installed packages).

    Code compiled from a string (``<train_step>``, a notebook cell's ``<ipython-input-...>``)
    is the learner's; Python's frozen modules (``<frozen importlib._bootstrap>``) are not.

    >>> is_library(torch.__file__), is_library("<train_step>"), is_library("/tmp/ipykernel_1/2.py")
    (True, False, False)
    """
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_DIRS) or any(part in path for part in _LIBRARY_PARTS)


def learner_call(frame) -> str | None:
    """``module.qualname`` of the function ``frame`` runs, when the learner's own code called it by name; else None.

    ``sys.setprofile`` callbacks use it. Not the learner's: a call the package makes to itself, one
    torch's Python code makes on the learner's behalf (a module's forward), and a callback torch's C++
    code makes while the learner's line runs (a saved-tensor hook inside ``node(*grads)``): the
    function is then not named on the learner's calling line (by its name, or by a name bound to it).

    >>> import sys
    >>> def probe():
    ...     return learner_call(sys._getframe())
    >>> probe()  # called from this doctest's code, which is not library code
    'autogradlab.tracebacks.probe'
    """
    caller = frame.f_back
    if caller is None or is_library(caller.f_code.co_filename) or not _named_on_line(caller, frame.f_code):
        return None
    return function_name(frame)


def function_name(frame) -> str:
    """``module.qualname`` of the function ``frame`` runs (cheap: no source is read)."""
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"


def _named_on_line(caller, code) -> bool:
    """Whether the call ``caller`` is making names the function of ``code`` (unknown source: assume it does)."""
    positions = list(caller.f_code.co_positions())
    index = caller.f_lasti // 2
    if not 0 <= index < len(positions) or positions[index][0] is None:
        return True
    first, last = positions[index][0], positions[index][1] or positions[index][0]
    text = "".join(linecache.getline(caller.f_code.co_filename, n) for n in range(first, last + 1))
    if not text:
        return True
    names = set(re.findall(r"[A-Za-z_]\w*", text))
    if code.co_name in names:
        return True
    for name in names:
        value = caller.f_locals.get(name, caller.f_globals.get(name))
        value = getattr(value, "__func__", value)
        if getattr(value, "__code__", None) is code:
            return True
    return False


def learner_frames(frames: Iterable[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """The frames of the learner's own code, outermost first (``traceback.extract_tb`` or ``extract_stack``)."""
    return [f for f in frames if not is_library(f.filename)]


def learner_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of the learner's own code in ``error``'s traceback, or None.

    >>> def learner():
    ...     return 1 / 0
    >>> try:
    ...     learner()
    ... except ZeroDivisionError as exc:
    ...     learner_frame(exc).line
    'return 1 / 0'
    """
    frames = learner_frames(traceback.extract_tb(error.__traceback__))
    return frames[-1] if frames else None


# --------------------------------------------------------------------------- what an error message means

ERROR_KINDS: dict[str, re.Pattern] = {
    # backward, autograd.grad or a saved-tensor read after backward released the graph
    "freed": re.compile(r"backward through the graph a second time"),
    # a tensor saved for backward was changed in place since (its version counter moved)
    "stale": re.compile(r"modified by an inplace operation|is at version \d+; expected version \d+"),
    # backward/grad on a tensor that has no graph (no_grad, inference mode, detach, no input requires grad)
    "no_graph": re.compile(r"does not require grad"),
    # autograd.grad with an input the output does not depend on
    "unused": re.compile(r"appears to not have been used in the graph"),
    # `if tensor:` or `tensor in list` on a tensor of several values
    "ambiguous_bool": re.compile(r"Boolean value of Tensor with more than one value is ambiguous"),
    # an elementwise op on two tensors whose shapes do not broadcast
    "size_mismatch": re.compile(r"must match the size of tensor"),
    # a backward node given a gradient of the wrong (e.g. broadcast) shape
    "grad_shape": re.compile(r"to a tensor of size|match the broadcast shape"),
    # a backward node called with the wrong number of gradients
    "node_arity": re.compile(r"expected \d+ arguments?, got \d+"),
    # a None where a tensor was expected (a gradient that never arrived)
    "none_value": re.compile(r"NoneType"),
    # unpacking or zipping a single tensor as if it were a tuple
    "not_iterable": re.compile(r"'tuple' object|not iterable"),
    # a recursive walk over a deep graph
    "recursion": re.compile(r"recursion", re.IGNORECASE),
    # GradScaler: unscale_ called twice for one optimizer before update()
    "scaler_unscaled_twice": re.compile(r"unscale_\(\) has already been called"),
    # GradScaler: unscale_ (or step) before any scaler.scale(loss) this iteration
    "scaler_never_scaled": re.compile(r"_scale is None"),
    # GradScaler: step found no inf/NaN record (no scaled backward reached this optimizer's gradients)
    "scaler_no_inf_checks": re.compile(r"No inf checks were recorded"),
}
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def _text(error: BaseException | str) -> str:
    return error if isinstance(error, str) else str(error)


def error_kind(error: BaseException | str) -> str | None:
    """The first kind in :data:`ERROR_KINDS` whose pattern the message matches, or None."""
    text = _text(error)
    return next((kind for kind, pattern in ERROR_KINDS.items() if pattern.search(text)), None)


def is_kind(error: BaseException | str, kind: str) -> bool:
    """Whether the message is one of ``kind`` (a key of :data:`ERROR_KINDS`).

    >>> is_kind("Trying to backward through the graph a second time", "freed")
    True
    """
    return ERROR_KINDS[kind].search(_text(error)) is not None


def hint_for(error: BaseException | str, hints: Mapping[str, str]) -> str | None:
    """The hint of the first kind in ``hints`` (in its order) that the message is, or None.

    ``hints`` maps kinds of :data:`ERROR_KINDS` to a caller's own hint text: the meaning
    of a message lives here, what it means for one exercise lives with the exercise.
    """
    unknown = set(hints) - set(ERROR_KINDS)
    if unknown:
        raise KeyError(f"unknown error kind(s) {sorted(unknown)}; known: {sorted(ERROR_KINDS)}")
    return next((hint for kind, hint in hints.items() if is_kind(error, kind)), None)


def stale_versions(error: BaseException | str) -> tuple[int, int] | None:
    """``(version now, version when saved)`` from a "modified by an inplace operation" message, or None.

    >>> stale_versions("... is at version 2; expected version 1 instead. Hint: ...")
    (2, 1)
    """
    found = _VERSIONS.search(_text(error))
    return (int(found.group(1)), int(found.group(2))) if found else None


def stack_frames() -> list[traceback.FrameSummary]:
    """The current call stack, outermost first, without this function's own frame."""
    return traceback.extract_stack()[:-1]


def error_frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``error``'s traceback, outermost first."""
    return traceback.extract_tb(error.__traceback__)
