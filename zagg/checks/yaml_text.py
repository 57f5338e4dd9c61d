"""Config YAML read strictly: a key written twice in one mapping is refused (naming both
lines) instead of the second silently winning, and a document whose aliases expand to more
values than any config holds (an alias bomb, "billion laughs") is refused before anything
walks it.

YAML aliases share one constructed object, so a few lines can stand for billions of
values: loading stays fast, but every later walk of the mapping (the attrs check, JSON
encoding into a store) would run for minutes or exhaust memory. The expanded size is
counted once on the composed node graph (each node's size memoized, so the count itself is
linear in the document) and bounded by :data:`MAX_VALUES`.
"""

from __future__ import annotations

import yaml

from zagg.checks.validation import ConfigError

#: the most values (scalars, mappings, sequences) a config may expand to, aliases
#: expanded: shipped configs hold a few hundred
MAX_VALUES = 100_000

MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing duplicate keys and alias bombs."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue  # keys merged in by `<<` may be overridden: that is YAML's rule
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the safe loader refuses it itself
                seen[key] = line
                if first is not None:
                    raise ConfigError(
                        f"config key {key!r} is defined twice in one mapping (line {first} and "
                        f"line {line}); YAML would keep only the second: delete one of them"
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_document(self, node):
        _check_expansion(node)
        return super().construct_document(node)


def _check_expansion(root) -> None:
    """Refuse a node graph whose aliases expand it beyond :data:`MAX_VALUES` values, naming
    the line of the smallest node that does."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are still being counted
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes or (id(node) in open_ and not children_done):
            if id(node) in open_ and id(node) not in sizes:
                raise ConfigError(
                    f"config YAML at line {node.start_mark.line + 1} contains itself through "
                    "an alias (*name inside the block its anchor &name marks): write the "
                    "values out"
                )
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        kids = (
            [n for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if not children_done:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(k), 0) for k in kids)
        if size > MAX_VALUES:
            raise ConfigError(
                f"config YAML expands to more than {MAX_VALUES:,} values at line "
                f"{node.start_mark.line + 1} (aliases, *name, repeat what their anchor, "
                "&name, holds, and nested aliases multiply): write the values out, or use "
                "fewer aliases"
            )
        sizes[id(node)] = size
        open_.discard(id(node))


def load_yaml(text: str):
    """The YAML document ``text``, read strictly (see the module docstring)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
