#!/usr/bin/env bash
# One GPU session for the course (issue 16), run from the repository root on a CUDA machine:
#   bash widgets/benchmarks/gpu_session.sh OUT_DIR [STEPS]
# STEPS (default "smoke tests record notebooks"), each writing into OUT_DIR:
#   smoke      every experiment at the smallest preset on CUDA (stops the session if it fails)
#   tests      the package tests that run on CUDA when it is there (-k cuda)
#   record     every experiment at the largest preset -> OUT_DIR/gpu_record.json (GPU timings: nothing else runs)
#   medium     every experiment at the medium preset (what chapter 08 runs live on a GPU) -> OUT_DIR/gpu_medium.json
#   notebooks  every solution notebook top to bottom with nbclient -> OUT_DIR/notebooks.json, executed.tar.gz
# The machine has no network: Python packages the image lacks come as wheels in .whl/ (see the device notes).
set -uo pipefail
out=${1:?usage: gpu_session.sh OUT_DIR [STEPS]}
steps=${2:-smoke tests record notebooks}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/widgets${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
experiments="python3 -m autogradlab.models.experiments"
status=0
for step in $steps; do
    echo "=== $step $(date -u +%H:%M:%S)"
    case $step in
        smoke) timeout 240 $experiments all --device cuda --preset cpu-small --quiet --out "$out/gpu_smoke.json" || exit 1 ;;
        tests) timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k cuda \
                   tests/test_experiments.py tests/test_experiments_cli.py tests/test_device.py || status=1 ;;
        record) timeout 560 $experiments all --device cuda --out "$out/gpu_record.json" 2>"$out/record.err" || status=1 ;;
        medium) timeout 240 $experiments all --device cuda --preset medium --quiet --out "$out/gpu_medium.json" || status=1 ;;
        notebooks) timeout 420 python3 widgets/benchmarks/run_notebooks.py solutions/*.ipynb --jobs 6 --out "$out" || status=1 ;;
        *) echo "unknown step $step"; status=1 ;;
    esac
done
exit $status
