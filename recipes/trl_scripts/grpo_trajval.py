"""A TRL GRPO script that ``trajval validate --trainer trl`` can run once per arm and seed.

Your own script needs what the ``# trajval`` lines do: ``TrajvalScriptArguments`` in its
``TrlParser`` (each run's pool, held-out set and weight column) and ``TrajvalGRPOTrainer`` with
that weight column (unset for the uniform arm: TRL's own sampler). Rows are verl-style
(``prompt``, ``reward_model.ground_truth``); the reward is 1 for a correct ``\\boxed{}`` answer
(math-verify). docs/howto/check_a_prior.md::

    accelerate launch --num_processes 8 recipes/trl_scripts/grpo_trajval.py \\
        --model_name_or_path /models/Qwen3-1.7B --max_steps 200 --per_device_train_batch_size 16 \\
        --num_generations 16 --eval_strategy steps --eval_steps 20 --learning_rate 1e-6
"""

from __future__ import annotations

from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

from trajval_ops.rollout.verifiers import build_verifier
from trajval_ops.samplers.trl import TrajvalGRPOTrainer, TrajvalScriptArguments  # trajval


def correct_answer_reward():
    verifier = build_verifier("math")

    def correct(completions, reward_model, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # chat or plain prompts
        return [verifier(text, model["ground_truth"]) for text, model in zip(texts, reward_model)]

    return correct


def main(argv: list[str] | None = None) -> None:
    parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig, TrajvalScriptArguments))  # trajval
    script_args, training_args, model_args, trajval_args = parser.parse_args_and_config(args=argv)
    train = held_out = None
    if script_args.dataset_name:  # the script's own data, used when trajval gives none
        from datasets import load_dataset

        data = load_dataset(script_args.dataset_name, name=script_args.dataset_config)
        train, held_out = data[script_args.dataset_train_split], data.get(script_args.dataset_test_split)
    train, held_out = trajval_args.datasets(train, held_out)  # trajval: the arm's pool, the held-out set
    trainer = TrajvalGRPOTrainer(
        model=model_args.model_name_or_path, reward_funcs=correct_answer_reward(), args=training_args,
        train_dataset=train, eval_dataset=held_out,
        weight_column=trajval_args.trajval_weight_column)  # trajval: None for the uniform arm
    trainer.train()
    trainer.save_state()  # trainer_state.json in the output folder, beside the checkpoints'


if __name__ == "__main__":
    main()
