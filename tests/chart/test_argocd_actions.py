"""The Argo CD resource actions for SessionHost (``drain`` and ``undrain``).

Argo CD runs ``<Kind>/actions/discovery.lua`` with the live object as the global ``obj`` and
shows the actions of the table it returns (an action whose ``disabled`` is true is greyed
out); running an action runs ``actions/<name>/action.lua`` the same way and patches the
object to the table it returns. Here both run with lupa's Lua 5.1 (Argo CD's gopher-lua speaks
5.1) on the SessionHosts the operator wrote during a live run
(``tests/support/fixtures/argocd/``). ``actions/action_test.yaml`` and ``actions/testdata/`` are
the same cases in the form Argo CD's own test runner reads; they are checked against the
scripts too.
"""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.argocd_health import HEALTH_DIR, health, load_fixture

Obj = dict[str, Any]

ACTIONS_DIR = HEALTH_DIR / "SessionHost" / "actions"
ACTIONS = ("drain", "undrain")
#: What Argo CD reads of a discovered action (anything else would be ignored or refused).
ACTION_KEYS = {"disabled", "iconClass", "displayName"}


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, dict):
        table = lua.table()
        for key, item in value.items():
            if item is not None:
                table[key] = _to_lua(lua, item)
        return table
    if isinstance(value, list):
        table = lua.table()
        for index, item in enumerate(value, start=1):
            table[index] = _to_lua(lua, item)
        return table
    return value


def _from_lua(value: Any) -> Any:
    """A Lua table as JSON-like data: keys 1..n make a list, anything else an object (an
    empty table is taken for an object)."""
    if not hasattr(value, "items"):
        return value
    items = {k: _from_lua(v) for k, v in value.items()}
    if items and all(isinstance(k, int) for k in items):
        keys = sorted(items)
        if keys == list(range(1, len(keys) + 1)):
            return [items[k] for k in keys]
    return {str(k): v for k, v in items.items()}


def run_lua(script: Path, obj: Obj) -> Any:
    lua51: Any = importlib.import_module("lupa.lua51")  # no type information shipped
    lua = lua51.LuaRuntime(unpack_returned_tuples=False)
    # Through JSON, as Argo CD does: only JSON types reach the script.
    lua.globals().obj = _to_lua(lua, json.loads(json.dumps(obj)))
    result = lua.execute(script.read_text(encoding="utf-8"))
    if result is None:
        raise AssertionError(f"{script.name} returned nothing")
    return _from_lua(result)


def discover(obj: Obj) -> dict[str, Obj]:
    found: dict[str, Obj] = run_lua(ACTIONS_DIR / "discovery.lua", obj)
    return found


def act(action: str, obj: Obj) -> Obj:
    out: Obj = run_lua(ACTIONS_DIR / action / "action.lua", obj)
    return out


@pytest.fixture(params=["sessionhost-available", "sessionhost-full", "sessionhost-new"])
def undrained(request: pytest.FixtureRequest) -> Obj:
    obj = load_fixture(request.param)
    assert obj["spec"]["drainMode"] is False
    return obj


@pytest.fixture
def drained() -> Obj:
    obj = load_fixture("sessionhost-draining")
    assert obj["spec"]["drainMode"] is True
    return obj


def test_the_layout_is_argo_cds() -> None:
    assert (ACTIONS_DIR / "discovery.lua").is_file()
    for action in ACTIONS:
        assert (ACTIONS_DIR / action / "action.lua").is_file(), action


def test_discovery_offers_drain_on_a_host_taking_sessions(undrained: Obj) -> None:
    actions = discover(undrained)
    assert set(actions) == set(ACTIONS)
    assert actions["drain"]["disabled"] is False
    assert actions["undrain"]["disabled"] is True
    for spec in actions.values():
        assert set(spec) <= ACTION_KEYS, spec


def test_discovery_offers_undrain_on_a_draining_host(drained: Obj) -> None:
    actions = discover(drained)
    assert actions["drain"]["disabled"] is True
    assert actions["undrain"]["disabled"] is False


def test_discovery_of_a_host_without_drain_mode_set() -> None:
    """A host written without drainMode (before the API server's default is applied, or
    an object with no spec at all) is not draining: drain is offered."""
    obj = load_fixture("sessionhost-available")
    del obj["spec"]["drainMode"]
    assert discover(obj)["drain"]["disabled"] is False
    del obj["spec"]
    assert discover(obj)["drain"]["disabled"] is False


def test_drain_sets_drain_mode_and_nothing_else(undrained: Obj) -> None:
    out = act("drain", undrained)
    expected = copy.deepcopy(undrained)
    expected["spec"]["drainMode"] = True
    assert out == expected
    # Once drained, discovery turns round.
    assert discover(out)["drain"]["disabled"] is True
    assert discover(out)["undrain"]["disabled"] is False


def test_undrain_clears_drain_mode_and_nothing_else(drained: Obj) -> None:
    out = act("undrain", drained)
    expected = copy.deepcopy(drained)
    expected["spec"]["drainMode"] = False
    assert out == expected
    assert discover(out)["drain"]["disabled"] is False


def test_drain_then_undrain_gives_the_object_back(undrained: Obj) -> None:
    assert act("undrain", act("drain", undrained)) == undrained


def test_actions_on_an_object_without_spec() -> None:
    obj = {"apiVersion": "hostpool.io/v1alpha1", "kind": "SessionHost", "metadata": {"name": "x"}}
    assert act("drain", obj)["spec"] == {"drainMode": True}
    assert act("undrain", obj)["spec"] == {"drainMode": False}


def test_the_health_check_agrees_with_the_action() -> None:
    """After drain the live Available host would show Suspended once the operator reports
    Draining; the drained fixture (the operator's own report) is Suspended."""
    assert health("SessionHost", load_fixture("sessionhost-draining"))["status"] == "Suspended"
    out = act("drain", load_fixture("sessionhost-available"))
    assert out["spec"]["drainMode"] is True


def test_argo_cd_test_cases_match_the_scripts() -> None:
    """``actions/action_test.yaml`` (Argo CD's format) holds what the scripts do."""
    cases = yaml.safe_load((ACTIONS_DIR / "action_test.yaml").read_text(encoding="utf-8"))
    assert cases["discoveryTests"]
    assert cases["actionTests"]
    for case in cases["discoveryTests"]:
        obj = yaml.safe_load((ACTIONS_DIR / case["inputPath"]).read_text(encoding="utf-8"))
        found = discover(obj)
        expected = {r["name"]: r for r in case["result"]}
        assert set(found) == set(expected), case["inputPath"]
        for name, result in expected.items():
            assert found[name]["disabled"] == result["disabled"], (case["inputPath"], name)
    seen = set()
    for case in cases["actionTests"]:
        obj = yaml.safe_load((ACTIONS_DIR / case["inputPath"]).read_text(encoding="utf-8"))
        expected_path = ACTIONS_DIR / case["expectedOutputPath"]
        expected = yaml.safe_load(expected_path.read_text(encoding="utf-8"))
        assert act(case["action"], obj) == expected, case
        seen.add(case["action"])
    assert seen == set(ACTIONS)


def test_testdata_inputs_are_the_live_fixtures() -> None:
    """The Argo CD test inputs are the objects the operator wrote (not hand-made)."""
    for state in ("available", "draining"):
        path = ACTIONS_DIR / "testdata" / f"{state}.yaml"
        assert yaml.safe_load(path.read_text(encoding="utf-8")) == load_fixture(
            f"sessionhost-{state}"
        )
