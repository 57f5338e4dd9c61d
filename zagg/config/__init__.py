"""The config: YAML parsed once into one typed, validated, frozen object that travels
to every stage, and the checks of a points Dataset against it. It parses each
stage's block with that stage's own parser (granules, windowing, pyramid) and
validates functions against the reducers' registry. From it, the store spec
(:mod:`zagg.config.store`) gathers once what every writer of the store reads.

May import the ground floor, checks, reducers, sources, windows, hive (the semantic
hash), pyramid.declare and pyramid.icechunk_knobs (the blocks those stages parse).
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "Config": ".model",
        "load_config": ".model",
        "ConfigError": ".model",
    },
)
