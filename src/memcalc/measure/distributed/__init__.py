"""``memcalc measure --nproc N``: the same model under torchrun with a parallel layout applied
by torch's own mechanisms, every rank's bytes counted exactly, every rank compared with its own
estimate.

* ``launch.py`` starts ``torch.distributed.run --standalone`` (a loopback rendezvous) and
  collects one JSON result per rank; ``worker.py`` is one rank; ``layouts.py`` applies DDP,
  FSDP2 (ZeRO-3) and DTensor tensor parallelism; ``pipeline.py`` runs a pipeline stage.
* On CPU (gloo) the runner's exact counting is reused: ``LiveMemoryTracker`` and
  ``SavedTensorRecorder`` see a DTensor's local storage, DTensor's own local ops and
  collectives, and FSDP2's storage resizes (``measure/tracker.py``).

What does not run here, and why (each is a one-line error from ``layouts.check_layout``):

* Context parallelism on CPU: ``context_parallel`` routes SDPA through DTensor, and torch 2.13
  has no sharding strategy for ``aten._scaled_dot_product_flash_attention_for_cpu``
  (``NotImplementedError``); the math backend fails on a DTensor/tensor mix. On CUDA it is
  refused too: ``context_parallel`` shards the sequence of the buffers it is handed, and the
  reference and HF models build their rotary positions and masks inside forward (torchtitan
  passes ``freqs_cis`` in as a buffer); that path is left for a model written for it.
* ZeRO-1 and ZeRO-2: torch's ``ZeroRedundancyOptimizer`` partitions whole parameters (greedy
  by size), not ZeRO's flat 1/dp slices the estimate models, and torch has no stage that
  shards gradients but keeps parameters whole.
* -mixed precision recipes, offload, expert parallelism, gradient accumulation without a
  pipeline, and more than one parallel dimension at a time are not measured.
* Tensor parallelism needs separate q/k/v and gate/up projections (Llama-style) and an untied
  head; pipeline parallelism splits memcalc's reference model (``--framework reference``).

On CUDA the same worker runs with nccl and the runner's ``torch.cuda`` protocol (not checked on
this project's CPU machines).
"""
