"""`vagen-host`'s plugin toolbox: check, fuzz, inspect."""

import json
from dataclasses import dataclass, field

from . import _plugin


@dataclass
class CheckResult:
    """`passed`, and each check as (name, passed, detail)."""

    passed: bool
    checks: list


@dataclass
class FuzzResult:
    episodes: int
    steps: int
    outcomes: dict
    # (kind, message, count) per kind of finding; empty when the plugin held.
    findings: list = field(default_factory=list)


def check(path, config=None, *, limits=None, allow_native=False):
    """The contract checks `vagen-host check` runs."""
    checks = _plugin.load(path, limits, allow_native).check(_plugin.config_json(config))
    return CheckResult(all(passed for _, passed, _ in checks), checks)


def fuzz(path, seconds, config=None, *, seed=0, limits=None, allow_native=False):
    """A `vagen-host fuzz` campaign of `seconds` (reproducers are not written)."""
    plugin = _plugin.load(path, limits, allow_native)
    episodes, steps, outcomes, findings = plugin.fuzz(float(seconds), _plugin.config_json(config), seed)
    return FuzzResult(episodes, steps, dict(outcomes), findings)


def inspect(path, *, allow_native=False):
    """The manifest and file facts (`vagen-host inspect`), as a dict."""
    plugin = _plugin.load(path, None, allow_native)
    return {"manifest": json.loads(plugin.manifest()), **json.loads(plugin.info())}
