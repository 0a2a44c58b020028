"""Zeus 0.16's public API as the specification of perseus.zeus: the real `zeus` package's modules that
perseus.zeus mirrors are enumerated with inspect — their public classes and functions, each class's
public methods and properties, every signature (parameter names, kinds and defaults; annotations
aside) — and compared with perseus.zeus's. Every difference must be listed, with its reason, in the
table of docs/zeus.md under "Differences from Zeus 0.16's API", and every row there must still be a
difference.

Zeus's public names of a module are the classes and functions it defines (a package: those it
imports from its submodules too), without a leading underscore; perseus's are its `__all__`."""
from __future__ import annotations

import enum
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest

zeus = pytest.importorskip("zeus")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "zeus.md"
HEADING = "## Differences from Zeus 0.16's API"

MIRRORED = [
    "zeus.callback",
    "zeus.device",
    "zeus.metric",
    "zeus.monitor",
    "zeus.monitor.__main__",
    "zeus.monitor.energy",
    "zeus.monitor.power",
    "zeus.optimizer.pipeline_frequency",
    "zeus.optimizer.power_limit",
    "zeus.utils.env",
]

Difference = Tuple[str, str]  # (qualified Zeus name, kind)


def zeus_public(module: Any) -> Dict[str, Any]:
    package = hasattr(module, "__path__")
    out = {}
    for name, value in vars(module).items():
        if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        home = getattr(value, "__module__", "") or ""
        if home == module.__name__ or (package and home.startswith("zeus.")):
            out[name] = value
    return out


def perseus_public(module: Any) -> Dict[str, Any]:
    assert hasattr(module, "__all__"), f"{module.__name__} declares its public names in __all__"
    return {name: getattr(module, name) for name in module.__all__}


def describe(signature: inspect.Signature) -> List[Tuple[str, str, str]]:
    """Parameter names, kinds and defaults (repr), without annotations."""
    return [(p.name, p.kind.name, "" if p.default is inspect.Parameter.empty else repr(p.default))
            for p in signature.parameters.values()]


def signature_of(value: Any) -> Any:
    try:
        return describe(inspect.signature(value))
    except (TypeError, ValueError):
        return None


def members(cls: type) -> Dict[str, Any]:
    """Public methods and properties a class has (inherited ones too), plus __init__."""
    out: Dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or callable(value):
            out[name] = value
    return out


def compare_callable(where: str, want: Any, got: Any, out: Set[Difference]) -> None:
    if isinstance(want, property) or isinstance(got, property):
        if isinstance(want, property) != isinstance(got, property):
            out.add((where, "kind"))
        return
    if signature_of(want) != signature_of(got):
        out.add((where, "signature"))


def compare_class(where: str, want: type, got: Any, out: Set[Difference]) -> None:
    if not inspect.isclass(got):
        out.add((where, "kind"))
        return
    if issubclass(want, enum.Enum):
        if not issubclass(got, enum.Enum) or [(m.name, m.value) for m in want] != [(m.name, m.value) for m in got]:
            out.add((where, "members"))
        return
    want_members, got_members = members(want), members(got)
    for name in sorted(set(want_members) | set(got_members)):
        if name not in got_members:
            out.add((f"{where}.{name}", "missing"))
        elif name not in want_members:
            out.add((f"{where}.{name}", "extra"))
        else:
            compare_callable(f"{where}.{name}", want_members[name], got_members[name], out)


def differences() -> Set[Difference]:
    out: Set[Difference] = set()
    for name in MIRRORED:
        want_module = importlib.import_module(name)
        try:
            got_module = importlib.import_module("perseus." + name)
        except ImportError:
            out.add((name, "missing"))
            continue
        want, got = zeus_public(want_module), perseus_public(got_module)
        for item in sorted(set(want) | set(got)):
            where = f"{name}.{item}"
            if item not in got:
                out.add((where, "missing"))
            elif item not in want:
                out.add((where, "extra"))
            elif inspect.isclass(want[item]):
                compare_class(where, want[item], got[item], out)
            else:
                compare_callable(where, want[item], got[item], out)
    return out


def listed() -> Dict[Difference, str]:
    """The docs' table: | `name` | kind | reason |."""
    text = DOCS.read_text()
    assert HEADING in text, f"{DOCS} has a section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        row = re.fullmatch(r"\|\s*`([^`]+)`\s*\|\s*(\w+)\s*\|(.*)\|\s*", line)
        if row:
            assert row[3].strip(), f"{row[1]} ({row[2]}): the reason is missing"
            rows[(row[1], row[2])] = row[3].strip()
    return rows


def test_every_difference_from_zeus_0_16_is_listed_with_its_reason() -> None:
    found, table = differences(), listed()
    unlisted = sorted(found - set(table))
    stale = sorted(set(table) - found)
    assert not unlisted, "differences from Zeus 0.16 not listed in docs/zeus.md:\n" + "\n".join(
        f"| `{name}` | {kind} | |" for name, kind in unlisted)
    assert not stale, "rows of docs/zeus.md that are no longer differences:\n" + "\n".join(map(str, stale))


def test_the_comparison_sees_a_changed_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    import perseus.zeus.utils.env as env

    def get_env(name: str, valtype: Any, fallback: Any = None) -> Any:  # a renamed parameter
        return None

    monkeypatch.setattr(env, "get_env", get_env)
    assert ("zeus.utils.env.get_env", "signature") in differences()
    monkeypatch.setattr(env, "__all__", [])
    assert ("zeus.utils.env.get_env", "missing") in differences()
