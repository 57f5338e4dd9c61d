"""The command line (``zagg`` and ``python -m zagg`` are one entry point): the parser,
its commands and the demo. May import anything.
"""
