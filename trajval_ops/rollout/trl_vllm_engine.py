"""TRL adapter: rollouts from a GRPO trainer's own vLLM engine (``use_vllm``, ``vllm_mode:
colocate``), so evaluations during training share the GPU and the weights with the trainer's
generation instead of starting a second engine.

Relies on trl 1.16's internals, all of them here (checked against trl 1.16.0):
``trainer.vllm_generation`` (``VLLMGeneration``: ``llm``, the in-process ``vllm.LLM``; ``mode``;
``enable_sleep_mode``; ``tensor_parallel_size``; ``sync_weights()``) and
``trainer._last_loaded_step``, the step whose weights the engine holds. The engine is brought to
the live policy's weights by TRL's own rule (the step moved since the last copy) and the tag is
set after, so TRL's next generation at the same step does not copy them again.

One process only: with several ranks or tensor parallelism every rank's engine takes part in
each generate call, and an evaluation runs on the main process alone. Sleep mode (the engine's
weights freed between generations) is refused as well: the harness never enables it.
"""

from __future__ import annotations

from trajval_ops.rollout.engines import DecodingConfig, vllm_sampling_params


class TrainerVllmEngine:
    """A :class:`~trajval_ops.rollout.engines.RolloutEngine` over ``trainer``'s colocated vLLM.

    :param trainer: a ``trl.GRPOTrainer`` (or subclass) built with ``use_vllm=True`` and
        ``vllm_mode="colocate"``, in a single process.
    """

    name = "vllm"
    seeds_each_prompt = True  # per-prompt seeds, as the endpoint mapper's vLLM engine

    def __init__(self, trainer):
        generation = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
        if generation is None:
            raise ValueError("the trainer generates with transformers (use_vllm is False): it has no vLLM engine to "
                             "evaluate with")
        if generation.mode != "colocate":
            raise ValueError(f"the trainer's vLLM runs in {generation.mode!r} mode: only a colocated engine (vllm_mode: "
                             "colocate) lives in the trainer's process")
        if generation.enable_sleep_mode:
            raise ValueError("the trainer's vLLM engine sleeps between generations (vllm_enable_sleep_mode): "
                             "evaluating with it is not supported; turn sleep mode off")
        if trainer.accelerator.num_processes > 1 or generation.tensor_parallel_size > 1:
            raise ValueError(f"the trainer runs {trainer.accelerator.num_processes} process(es) with vLLM tensor "
                             f"parallel size {generation.tensor_parallel_size}: every rank's engine takes part in a "
                             "generate call, and an evaluation runs on the main process alone")
        self._trainer, self._generation = trainer, generation
        processing_class = trainer.processing_class
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)  # a processor holds one
        model_config = generation.llm.llm_engine.model_config
        self.max_context = int(model_config.max_model_len)
        self.dtype = str(model_config.dtype).replace("torch.", "")
        self.generated_tokens = 0

    def generate(self, prompts: list[str], decoding: DecodingConfig) -> list[list[str]]:
        return self.generate_counted(prompts, decoding)[0]

    def generate_counted(self, prompts: list[str], decoding: DecodingConfig) -> tuple[list[list[str]], list[int]]:
        from vllm import SamplingParams

        from trajval_ops.rollout.vllm_process import completions_of

        if not prompts:
            return [], []
        self._load_live_weights()
        outputs = self._generation.llm.generate(
            prompts, [SamplingParams(**params) for params in vllm_sampling_params(prompts, decoding)], use_tqdm=False)
        texts, tokens = completions_of(outputs)
        self.generated_tokens += sum(tokens)
        return texts, tokens

    def _load_live_weights(self) -> None:
        """Copy the policy's weights into the engine when a step has passed since the last copy."""
        trainer = self._trainer
        step = trainer.state.global_step
        if trainer._last_loaded_step != step:
            self._generation.sync_weights()
            trainer._last_loaded_step = step

    def shutdown(self) -> None:
        """Nothing to stop: the trainer owns its engine."""
