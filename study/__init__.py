"""The matched-data study as a pipeline (``passkt study``), and its testbed.

A study evaluates a base policy, trains SFT, GRPO (and the RFT control) on the same problems from
that base, evaluates every trained policy on the same held-out problems and reports whether the
PASS@(k,T) boundary moved. A profile (``profiles/*.toml`` or your own file) says which envs,
models, trainers and sizes; ``passkt study run PROFILE --out DIR`` runs it stage by stage, each
stage resumable unit by unit. ``passkt.study.testbed`` makes small agent models from scratch in a
synthetic world (tokenizer, model, corpus, pretraining), so the whole study runs on a CPU.
"""
