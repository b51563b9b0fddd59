"""``python -m autogradlab.models.experiments {amp,underflow,...,all} --device auto --out FILE.json``.

Runs the experiments with tqdm progress, writes one JSON file (a header saying
device, torch version, date and command, then each result) and prints a
Markdown table per experiment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from autogradlab.models.experiments import EXPERIMENTS, largest_mlp_fraction, table
from autogradlab.models.experiments.common import (
    PRESETS,
    as_record,
    experiment_device,
    header,
    json_safe,
    resolve_preset,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m autogradlab.models.experiments", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"], help="which experiment to run, or all of them")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cuda or cpu")
    parser.add_argument(
        "--preset", default="auto", choices=["auto", *PRESETS], help="sizes: auto = cpu-small on CPU, gpu-large on CUDA"
    )
    parser.add_argument("--out", type=Path, help="write the results JSON here")
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend of the compile experiment (inductor; aot_eager for a quick CPU run)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars and no tables")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        device = experiment_device(args.device)
        preset = resolve_preset(args.preset, device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    command = " ".join(["python -m autogradlab.models.experiments", *(sys.argv[1:] if argv is None else argv)])
    record = {"header": header(device, preset, command), "results": {}, "seconds": {}}
    from tqdm.auto import tqdm

    bar = tqdm(names, desc="experiments", disable=args.quiet)
    for name in bar:
        bar.set_postfix_str(name)
        start = time.perf_counter()
        options = {"backend": args.compile_backend} if name == "compile" else {}
        result = EXPERIMENTS[name](device, preset, progress_bar=not args.quiet, **options)
        record["seconds"][name] = round(time.perf_counter() - start, 2)
        record["results"][name] = as_record(result)
        if args.out:  # written after every experiment, so a crash late in a long GPU run keeps the rest
            _write(args.out, record)
    if not args.quiet:
        print(
            record["header"]["command"], "·", record["header"]["device_name"], "·", "torch", record["header"]["torch"]
        )
        for name in names:
            print(f"\n## {name} ({record['seconds'][name]} s)\n\n{table(name, record['results'][name])}")
            if name == "amp" and (fraction := largest_mlp_fraction(record["results"]["amp"])) is not None:
                print(f"\nbf16 MLP step, largest configuration: {fraction:.2f} of the measured bf16 matmul peak")
    return 0


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(json_safe(record), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
