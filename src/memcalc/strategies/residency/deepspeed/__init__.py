"""DeepSpeed's ZeRO engine (``deepspeed/runtime/zero/``, DeepSpeed 0.19.8) as a sharding engine
for HF models: ``engine.deepspeed_rank`` gives one data-parallel rank's states and what it holds
at each moment of the step.

* ``trace.py`` -- the rank's parameters as DeepSpeed meets them (``model.parameters()`` order,
  the forward's module order);
* ``flat.py`` -- ZeRO-1/2's flat padded buffer and partitions;
* ``buckets.py`` -- when the gradient (ipg) bucket is reduced;
* ``zero12.py`` -- ZeRO-1 / ZeRO-2's gradients; ``bf16_optimizer.py`` -- ZeRO-1 with fp32
  gradient accumulation;
* ``zero3.py`` -- ZeRO-3's partitions, gradients and step; ``fetch.py`` -- its parameter
  coordinator (fetch, prefetch, release);

Every rule cites the DeepSpeed function it mirrors. Where CUDA and the CPU accelerator differ
(gloo's reduce-scatter copy, pinned host buffers) the GPU estimate follows CUDA and the CPU
comparison (``device="cpu"``) the CPU run; each module says which.
"""
