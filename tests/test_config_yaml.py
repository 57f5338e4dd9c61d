"""Config YAML read strictly: a key twice in one mapping and an alias bomb are refused
with one line naming the lines, before any walk of the document."""

import pytest

from zagg.checks import yaml_text
from zagg.config.model import ConfigError, load_config

CONFIG = """\
data_source:
  coordinates: {latitude: lat, longitude: lon}
  variables: [h]
  synthetic: {points: 1000}
aggregation:
  variables:
    count: {function: count}
    h_mean:
      function: mean
      source: h
      attrs:
        units: m
output:
  dataset: {short_name: T, version: "1"}
  grid: {type: healpix, parent_order: 6, child_order: 12}
"""


def test_the_plain_config_loads():
    cfg = load_config(CONFIG)
    assert list(cfg.fields) == ["count", "h_mean"]


def test_a_field_defined_twice_is_refused_naming_both_lines():
    text = CONFIG.replace("    count: {function: count}\n", "    h_mean: {function: count}\n")
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert str(err.value) == (
        "config key 'h_mean' is defined twice in one mapping (line 7 and line 8); "
        "YAML would keep only the second: delete one of them"
    )


def test_a_key_twice_in_a_flow_mapping_or_at_the_top_is_refused():
    with pytest.raises(ConfigError, match=r"'grid' is defined twice .*line 15 and line 15"):
        load_config(CONFIG.replace("{type: healpix,", "{grid: 1, grid: 2, type: healpix,"))
    with pytest.raises(ConfigError, match=r"'output' is defined twice .*line 13 and line 16"):
        load_config(CONFIG + "output: {}\n")


def test_a_merge_key_may_be_overridden():
    # `<<: *base` then an explicit key is YAML's override, not a duplicate
    raw = yaml_text.load_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n")
    assert raw["use"] == {"x": 3, "y": 2}


def bomb(levels: int) -> str:
    """attrs whose aliases expand to 9**levels strings."""
    lines = ["        l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    for i in range(1, levels):
        lines.append(f"        l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return CONFIG.replace("        units: m\n", "        units: m\n" + "\n".join(lines) + "\n")


def test_an_alias_bomb_in_attrs_is_refused_before_it_is_walked():
    # 9**9 = 387 million strings: walking them would take minutes; refused at once
    with pytest.raises(ConfigError) as err:
        load_config(bomb(9))
    msg = str(err.value)
    assert msg.startswith("config YAML expands to more than 100,000 values at line 18 ")
    assert "write the values out" in msg and "\n" not in msg


def test_a_few_aliases_are_fine_and_a_self_containing_one_is_refused():
    cfg = load_config(bomb(3))  # 9**3 strings
    attrs = cfg.fields["h_mean"].attrs
    assert len(attrs["l2"]) == 9 and attrs["l2"][0][0] == ["lol"] * 9
    with pytest.raises(ConfigError, match="at line 1 contains itself through an alias"):
        yaml_text.load_yaml("a: &x\n  b: *x\n")


@pytest.mark.parametrize("case", ["bomb", "twice"])
def test_the_command_line_refuses_either_in_one_line(tmp_path, case):
    import subprocess
    import sys

    text = bomb(9) if case == "bomb" else CONFIG + "output: {}\n"
    (tmp_path / "c.yaml").write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        timeout=120,  # a walk of the expanded attrs would run for minutes
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("zagg: error: config ")
