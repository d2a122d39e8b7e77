"""passkt.eval: the PASS@(k,T) evaluator, statistics, plots and the ``passkt`` CLI."""
