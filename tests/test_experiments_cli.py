"""The experiments CLI (header, JSON, tables) and the loader for recorded results."""

import json
import subprocess
import sys

import pytest
import torch

from autogradlab.models.experiments import EXPERIMENTS
from autogradlab.models.experiments.__main__ import main
from autogradlab.models.experiments.recorded import describe, latest_recorded, load_results, recorded_files


def test_cli_writes_header_and_results(tmp_path, capsys):
    out = tmp_path / "cpu_test.json"
    assert main(["scaler", "--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    head = data["header"]
    assert head["device"] == "cpu" and head["preset"] == "cpu-small" and head["torch"]
    assert head["command"] == f"python -m autogradlab.models.experiments scaler --device cpu --out {out}"
    assert head["date"].endswith("+00:00")
    assert head["load_average_1min"] >= 0 and head["cpu_threads"] >= 1
    assert set(data["results"]) == {"scaler"} and data["results"]["scaler"]["skipped_steps"]
    printed = capsys.readouterr().out
    assert "## scaler" in printed and "| step |" in printed


def test_cli_rejects_unknown_device_and_experiment(capsys):
    assert main(["inplace", "--device", "tpu"]) == 2
    assert "unknown device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["nonsense"])


@pytest.mark.slow  # starts a Python process
def test_module_entry_point_runs(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autogradlab.models.experiments",
            "inplace",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert load_results(out).results["inplace"]["cases"][0]["raised"] is True


def test_recorded_loader_picks_latest_and_describes_it(tmp_path):
    for name, date in (("gpu_a.json", "2026-01-01T00:00:00+00:00"), ("gpu_b.json", "2026-02-01T10:30:00+00:00")):
        header = {
            "device": "cuda",
            "device_name": "NVIDIA X",
            "torch": "2.13.0",
            "date": date,
            "command": "c",
            "preset": "gpu-large",
        }
        (tmp_path / name).write_text(json.dumps({"header": header, "results": {"clip": {}}}))
    (tmp_path / "cpu_a.json").write_text(json.dumps({"header": {}, "results": {}}))
    assert [p.name for p in recorded_files("gpu", tmp_path)] == ["gpu_a.json", "gpu_b.json"]
    latest = latest_recorded("gpu", tmp_path)
    assert latest.path.name == "gpu_b.json"
    assert (
        latest.describe()
        == "measured on NVIDIA X (cuda) · torch 2.13.0 · 2026-02-01 10:30 UTC · preset gpu-large · `c`"
    )
    assert latest_recorded("tpu", tmp_path) is None
    with pytest.raises(ValueError, match="header lacks"):
        latest_recorded("cpu", tmp_path)


def test_loader_rejects_files_without_header(tmp_path):
    path = tmp_path / "gpu_bad.json"
    path.write_text(json.dumps({"results": {}}))
    with pytest.raises(ValueError, match="needs 'header' and 'results'"):
        load_results(path)


def test_describe_tolerates_missing_fields():
    assert describe({}).startswith("measured on ? (?)")


def test_recorded_summary_shows_a_gpu_file_with_its_provenance(tmp_path):
    # the chapter's "recorded GPU results" path, kept alive by a small synthetic file here (never in the package data)
    from autogradlab.models.experiments import recorded_summary, run_autocast, run_inplace
    from autogradlab.models.experiments.common import as_record

    assert recorded_summary("gpu", tmp_path).startswith("No GPU has run these experiments for the course yet")
    header = {
        "device": "cuda",
        "device_name": "NVIDIA Synthetic",
        "torch": "2.13.0",
        "date": "2026-03-04T05:06:00+00:00",
        "command": "python -m autogradlab.models.experiments all --device cuda",
        "preset": "gpu-large",
    }
    results = {
        "autocast": as_record(run_autocast("cpu")),
        "inplace": as_record(run_inplace("cpu")),
        "amp": {"rows": "old format"},
    }
    (tmp_path / "gpu_synthetic.json").write_text(json.dumps({"header": header, "results": results}))
    text = recorded_summary("gpu", tmp_path)
    first = text.splitlines()[0]
    assert (
        "gpu_synthetic.json" in first
        and "measured on NVIDIA Synthetic (cuda)" in first
        and "2026-03-04 05:06 UTC" in first
    )
    assert "**autocast**" in text and "| op |" in text and "**inplace**" in text and "| case |" in text
    assert "a format this version cannot read" in text  # an unreadable record is said so, not a traceback


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA: runs on a GPU machine (issue 16)")
def test_cli_runs_every_experiment_at_the_smallest_preset_on_cuda(tmp_path):
    out = tmp_path / "gpu_smoke.json"
    assert main(["all", "--device", "cuda", "--preset", "cpu-small", "--quiet", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["header"]["device"] == "cuda" and data["header"]["cuda"]
    assert list(data["results"]) == list(EXPERIMENTS)
    # CUDA-only columns are filled: peak memory of every timed step, measured bytes of every checkpoint row
    assert all(r["peak_memory_bytes"] > 0 for r in data["results"]["amp"]["rows"])
    assert all(r["measured_held_bytes"] is not None for r in data["results"]["checkpoint"]["rows"])


def test_the_recorded_gpu_run_ships_with_the_package_and_every_table_reads_it():
    from autogradlab.models.experiments import data_dir, largest_mlp_fraction, load_results, table

    recorded = load_results(data_dir() / "gpu_h100.json")  # package data, as chapter 08 reads it
    assert recorded.header["device"] == "cuda" and recorded.header["cuda"] and "H100" in recorded.header["device_name"]
    assert latest_recorded("gpu").path.name == "gpu_h100.json"
    # chapter 08's and chapter 04's experiments (an experiment added later need not be in this recording)
    chapter_08 = {"autocast", "underflow", "scaler", "clip", "amp", "accumulation", "inplace", "checkpoint"}
    assert chapter_08 <= set(recorded.results) <= set(EXPERIMENTS)
    for name, rec in recorded.results.items():
        assert table(name, rec).startswith("|"), name
    # what the run was for (issue 16): the bf16 MLP step is compute-bound, the checkpoint prediction is the held memory
    amp = recorded.results["amp"]
    assert largest_mlp_fraction(amp) >= 0.5
    for row in recorded.results["checkpoint"]["rows"]:
        assert 0 <= row["measured_held_bytes"] - row["predicted_saved_bytes"] <= 512  # the loss's allocator block


def test_chapter_08_reads_the_recorded_gpu_run_as_the_data_says():
    """The prose of chapter 08's last section (and its pointers to it), held against the shipped recording."""
    from autogradlab.models.experiments import data_dir, load_results, speedups

    results = load_results(data_dir() / "gpu_h100.json").results
    amp = results["amp"]
    row = {(r["model"], r["mode"]): r for r in amp["rows"]}
    speedup = speedups(amp)
    small, large = "mlp", "mlp-2"  # B = W = 1024 and B = W = 8192
    assert row[small, "fp32"]["flops"] < row[large, "fp32"]["flops"]
    # "the 16-bit step is about an order of magnitude faster, TF32 several times ... near the measured matmul peak"
    assert speedup[large, "bf16"] >= 8 and speedup[large, "fp16"] >= 8 and 3 <= speedup[large, "tf32"] < 10
    assert row[large, "bf16"]["fraction_of_peak"] >= 0.75 and 1.0 < row[large, "fp32"]["fraction_of_peak"] < 1.05
    # "on the small MLP 16 bits gain nothing: bf16 and fp16 are slower than fp32, at about 2% of their peak
    # (TF32 still gains a quarter)"
    assert speedup[small, "bf16"] < 1 and speedup[small, "fp16"] < 1 and round(speedup[small, "tf32"], 2) == 1.26
    assert all(0.01 < row[small, mode]["fraction_of_peak"] < 0.03 for mode in ("bf16", "fp16"))
    # "memory falls much less than half"
    assert 0.5 < row[large, "bf16"]["peak_memory_bytes"] / row[large, "fp32"]["peak_memory_bytes"] < 1
    # accumulation: "64 micro-batches add up to 4e-9 of their exact sum"; with bf16 parameters "the error grows with K"
    acc = {(r["precision"], r["k"]): r["accumulation_error"] for r in results["accumulation"]["rows"]}
    assert 3.5e-9 < acc["bf16 autocast", 64] < 4.5e-9
    assert acc["bf16 parameters", 4] < acc["bf16 parameters", 16] < acc["bf16 parameters", 64]
    # "on CUDA softmax, layer_norm, exp and sum run in fp32" (and the other chapter-08 pointers to this run)
    dtypes = {r["op"]: r for r in results["autocast"]["rows"]}
    assert all("float32" in str(dtypes[op]) for op in ("softmax", "layer_norm", "exp", "sum"))
    underflow = results["underflow"]
    assert underflow["rows"][0]["scale"] == 1.0 and underflow["rows"][0]["flushed_fraction"] == 1.0
    assert round(underflow["forward_floor"], 3) == 0.203
    scaler = results["scaler"]
    assert (
        min(s for s in scaler["skipped_steps"] if s not in scaler["injected"]) == 10
        and not scaler["scheduler_warnings"]
    )
    clip = results["clip"]
    norms = {(r["optimizer"], r["order"]): r["update_norm"] for r in clip["rows"]}
    assert round(norms["Adam", "right"] / norms["Adam", "bug"]) == 167
    assert clip["sweep"][-1]["parameters"] > 1e8 and round(clip["sweep"][-1]["Adam"], 2) == 0.12
    # checkpoint: "+18% FLOP, +19% time at depth 2, a peak of 465 instead of 784 MiB (1425 instead of 9424 at depth 32)"
    ckpt = {(r["depth"], r["checkpoint"]): r for r in results["checkpoint"]["rows"]}
    assert round(100 * (ckpt[2, True]["flops"] / ckpt[2, False]["flops"] - 1)) == 18
    assert round(100 * (ckpt[2, True]["step_ms"] / ckpt[2, False]["step_ms"] - 1)) == 19
    peaks = [
        round(ckpt[d, c]["measured_peak_bytes"] / 2**20) for d, c in ((2, False), (2, True), (32, False), (32, True))
    ]
    assert peaks == [784, 465, 9424, 1425]
