"""Time windows: the schedule of a windowed store and what each observation belongs to.

:mod:`~zagg.windows.schedule` parses and validates ``output.windowing``;
:mod:`~zagg.windows.assign` maps instants to windows and windows to labels and bounds;
:mod:`~zagg.windows.units` keys a run's (shard, window) units; :mod:`~zagg.engine.reduce_windows`
splits a chunk's reduction by window.

May import the ground floor and checks: the time algebra knows no store.
"""

from zagg.windows.schedule import Window, Windowing, parse_windowing

__all__ = ["Window", "Windowing", "parse_windowing"]
