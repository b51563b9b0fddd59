"""Chinese text in the browser tests: a pattern for Chinese characters, and a check that they are drawn in real glyphs.

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
