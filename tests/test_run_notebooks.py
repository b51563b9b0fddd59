"""widgets/benchmarks/run_notebooks.py: the runner that proved every chapter on CUDA must report a failing cell."""

import importlib.util
import json
import tarfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "widgets" / "benchmarks" / "run_notebooks.py")
run_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_notebooks)


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_reports_each_notebook_and_the_cell_that_failed(tmp_path, capsys):
    good = _notebook(tmp_path / "good.ipynb", "print('device: cpu (test)')", "x = 1")
    bad = _notebook(tmp_path / "bad.ipynb", "x = 1", "raise ValueError('broken on this device')", "print('never')")
    out = tmp_path / "out"
    assert run_notebooks.main([str(good), str(bad), "--jobs", "2", "--out", str(out)]) == 1  # one failed
    rows = {r["notebook"]: r for r in json.loads((out / "notebooks.json").read_text())}
    assert rows["good.ipynb"]["error"] is None and rows["good.ipynb"]["device"] == "device: cpu (test)"
    assert rows["bad.ipynb"]["cell"] == 1 and "broken on this device" in rows["bad.ipynb"]["error"]
    with tarfile.open(out / "executed.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["bad.ipynb", "good.ipynb"]
    assert "| bad.ipynb |" in capsys.readouterr().out


def test_a_missing_notebook_is_an_error_message(tmp_path, capsys):
    assert run_notebooks.main([str(tmp_path / "nope.ipynb")]) == 2
    assert "no such notebook" in capsys.readouterr().err
