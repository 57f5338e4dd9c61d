"""A run around the engine: its plan (decided before any cluster starts, printable) and
the executor that runs it, region batches, the re-run gate with its hooks and records,
where the tasks' time went, the dashboard watch and the kernel warm-up.

May import every floor below it; only cli imports it.
"""
