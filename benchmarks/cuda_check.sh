#!/usr/bin/env bash
# On a machine with a CUDA GPU: the cuda-marked tests, then the accuracy table measured on CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name())"
python -m pytest -m cuda tests/test_measure.py -q
python benchmarks/accuracy.py --device cuda --batch 4 --seq 512
python -m memcalc measure --model gpt2 --batch 4 --seq 512 --recompute full --precision bf16-mixed --attention sdpa
