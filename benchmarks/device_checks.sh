#!/usr/bin/env bash
# The checks that need a lent machine with many cores and a GPU (the device tool; CI never runs there):
#   1. readers.torch_loader's tests, CUDA ones included;
#   2. benchmarks/scaling.py: process workers from 1 to every core against multiprocessing.Pool, the start
#      cost of a pass, and the GPU feed (an MNIST CNN epoch against the data already on the GPU);
#   3. benchmarks/remote.py's replica rows with 1, 2, 4 and 8 servers: one client, and 8 clients at once.
# Each step is bounded in time and writes its output to OUT_DIR (its figures as JSON too).
#
# Usage, from the repository's root: bash benchmarks/device_checks.sh MNIST_DIR OUT_DIR [STEPS]
#   STEPS: which of 1 2 3 to run (default "1 2 3").
set -u
data=$1
out=$2
steps=${3:-1 2 3}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
python3 -c "import os, platform, numpy, torch
print(platform.python_version(), 'numpy', numpy.__version__, 'torch', torch.__version__, 'cores', os.cpu_count(),
      'cuda', torch.cuda.is_available() and torch.cuda.get_device_name(0))" 2>&1 | tee "$out/machine.txt"
for step in $steps; do
  start=$(date +%s)
  case $step in
    1) timeout 120 python3 -m pytest -q -n 0 -p no:cacheprovider -rs tests/readers/interop/test_torch_loader.py \
         > "$out/torch_loader_tests.txt" 2>&1; echo "tests: rc $?"; tail -n 5 "$out/torch_loader_tests.txt" ;;
    2) timeout 280 python3 benchmarks/scaling.py --data-dir "$data" --json "$out/scaling.json" \
         > "$out/scaling.txt" 2> "$out/scaling.err"; echo "scaling: rc $?"; cat "$out/scaling.txt" ;;
    3) for clients in 1 8; do
         timeout 110 python3 benchmarks/remote.py --sections d --replicas 8 --replica-clients $clients \
           --tokens 50000000 --batches 600 --repeats 3 --seconds 3 --mnist /nonexistent \
           --json "$out/replicas_$clients.json" > "$out/replicas_$clients.txt" 2>&1
         echo "replicas, $clients clients: rc $?"; tail -n 7 "$out/replicas_$clients.txt"
       done ;;
  esac
  echo "step $step: $(( $(date +%s) - start )) s"
done
