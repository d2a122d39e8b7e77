"""Mechanism analyses of evaluation runs.

- :mod:`passkt.eval.analysis.perplexity`: token NLL and perplexity of trajectories under a scoring
  model, split by segment (search queries, reasoning, answers, tags);
  :mod:`passkt.eval.analysis.segments` says which token belongs to which segment.
- :mod:`passkt.eval.analysis.diversity`: strategy diversity (unique search-query sequences per
  problem) and the overlap of two policies' query sequences.
- :mod:`passkt.eval.analysis.boundary_report`: boundary-set sizes, saturation depth and the
  problems only one run solves, as a report section for ``passkt compare``.
- :mod:`passkt.eval.analysis.cli`: ``passkt analyze ppl|diversity``.
- :mod:`passkt.eval.analysis.common`: reading a run's records at one budget, Markdown tables.

Modules are imported on demand (``perplexity`` needs torch, the others do not).
"""
