"""A run around the engine: the run itself, region batches, the re-run gate and its
records, where the tasks' time went, the dashboard watch and the kernel warm-up.

May import every floor below it; only cli imports it.
"""
