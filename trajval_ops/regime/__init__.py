"""An embedded miniature RL regime: procedural arithmetic/string tasks with exact answers
(:mod:`.tasks`), a character-level tokenizer (:mod:`.tokenizer`) and the script that pretrains the
shipped ``tiny-arith`` Llama to partial competence (:mod:`.pretrain`).

Everything runs on one CPU thread in minutes, so the whole product (probe trainer, endpoint
mapper, samplers, report) can be exercised end to end on a task where GRPO really learns.
"""
