"""What a run of a student chapter (every exercise unsolved) must show, read from the executed notebook; and
Chinese text in the browser. Used by tests/test_browser.py (JupyterLab) and tests/test_zh_chapters.py (nbclient).

``DRAWN`` (a Playwright ``locator.evaluate`` function) draws two different Chinese characters on a canvas in
the element's font: identical pictures mean both are the missing-glyph box, i.e. no installed font has Chinese
glyphs (Debian: ``apt-get install fonts-wqy-microhei`` or ``fonts-noto-cjk``) and a reader would see boxes.
"""

import re

CJK = re.compile(r"[\u4e00-\u9fff]")
NO_FONT = "Chinese characters are drawn as missing-glyph boxes: install a CJK font (apt-get install fonts-wqy-microhei)"
DRAWN = """(el) => {
  const canvas = document.createElement('canvas'); canvas.width = canvas.height = 48;
  const g = canvas.getContext('2d');
  const draw = (ch) => { g.clearRect(0, 0, 48, 48); g.font = `32px ${getComputedStyle(el).fontFamily}`;
                         g.fillText(ch, 4, 36); return g.getImageData(0, 0, 48, 48).data.join(','); };
  return draw('中') !== draw('文');
}"""


def outcome(nb) -> tuple[list[str], list[str]]:
    """(what went wrong, the checks' messages) in an executed student chapter.

    Wrong: a cell that raised without the ``raises-exception`` tag, or a check (nbgrader grade) cell that did
    not fail with the checker's ``ExerciseError`` (a ``NameError`` is allowed after a whole-cell stub, which
    defines nothing).
    """
    wrong, messages, previous = [], [], None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and "raises-exception" not in cell.metadata.get("tags", []):
            wrong.append(f"cell {index} raised {errors[0].ename}: {errors[0].evalue[:300]}")
        if cell.metadata.get("nbgrader", {}).get("grade"):
            stubbed = previous is not None and any(o.get("ename") == "NotImplementedError" for o in previous.outputs)
            names = [o.ename for o in errors]
            if names not in ((["ExerciseError"], ["NameError"]) if stubbed else (["ExerciseError"],)):
                wrong.append(
                    f"check cell {index} ({cell.source[:60]!r}) gave {names}: {[o.evalue[:300] for o in errors]}"
                )
            messages += [o.evalue for o in errors if o.ename == "ExerciseError"]
        previous = cell
    return wrong, messages
