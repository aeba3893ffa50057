#!/usr/bin/env bash
# On a machine with a CUDA GPU: the cuda-marked tests, then the accuracy table measured on CUDA,
# then the caching-allocator model against the real allocator (one short run).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name(), torch.__version__)"
# the replay against torch's allocator: same events, reserved / allocated / retries exact
python -m pytest -m cuda tests/test_allocator_cuda.py tests/test_measure.py -q
python benchmarks/accuracy.py --device cuda --batch 4 --seq 512
# reserved memory of real training steps beside the model's (rows "reserved
# (max_memory_reserved)", "allocator retries", "outside the allocator (context)"), with the
# default allocator and with expandable segments
python -m memcalc measure --model gpt2 --batch 4 --seq 512 --recompute full --precision bf16-mixed --attention sdpa
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    python -m memcalc measure --model gpt2 --batch 4 --seq 512 --recompute full --precision bf16-mixed --attention sdpa
python -m memcalc measure --model tests/data/tiny-llama.toml --batch 8 --seq 1024 --precision bf16-mixed
