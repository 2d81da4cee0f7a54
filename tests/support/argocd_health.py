"""Run the chart's Argo CD health checks (Lua) the way Argo CD does, from Python.

Argo CD runs ``argocd/<group>/<Kind>/health.lua`` with gopher-lua (Lua 5.1), with the live
object as the global table ``obj``, and reads ``status`` and ``message`` from the table the
script returns. :func:`health` does the same with lupa's Lua 5.1 runtime.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from support.paths import CHART_DIR, REPO_ROOT

HEALTH_DIR = CHART_DIR / "argocd" / "hostpool.io"
FIXTURE_DIR = REPO_ROOT / "tests" / "support" / "fixtures" / "argocd"

#: The statuses Argo CD knows (health.HealthStatusCode).
ARGO_STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")


def script_path(kind: str) -> Path:
    return HEALTH_DIR / kind / "health.lua"


def _to_lua(lua: Any, value: Any) -> Any:
    """JSON-like Python data as Lua values: objects and arrays become tables (arrays from 1)."""
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


def health(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    """The health (``{"status": ..., "message": ...}``) the Lua check gives ``obj``."""
    lua51: Any = importlib.import_module("lupa.lua51")  # no type information shipped
    lua = lua51.LuaRuntime(unpack_returned_tuples=False)
    # Through JSON, as Argo CD does: only JSON types reach the script.
    lua.globals().obj = _to_lua(lua, json.loads(json.dumps(obj)))
    result = lua.execute(script_path(kind).read_text(encoding="utf-8"))
    if result is None:
        raise AssertionError(f"{kind}/health.lua returned nothing")
    out = {str(k): str(v) for k, v in result.items()}
    if out.get("status") not in ARGO_STATUSES:
        raise AssertionError(f"{kind}/health.lua returned an unknown status: {out}")
    return out


#: Fixture name prefix -> kind; ``hostpool-ready.json`` is ``HostPool/testdata/ready.yaml``.
KIND_OF_PREFIX = {
    "hostpool": "HostPool",
    "sessionhost": "SessionHost",
    "sessionrequest": "SessionRequest",
    "scalingplan": "ScalingPlan",
}


def argo_testdata_path(fixture: str) -> Path:
    """Where Argo CD's layout keeps a fixture: ``<Kind>/testdata/<state>.yaml`` beside the
    script, listed in ``<Kind>/health_test.yaml`` (what an upstream contribution needs)."""
    prefix, state = fixture.split("-", 1)
    return HEALTH_DIR / KIND_OF_PREFIX[prefix] / "testdata" / f"{state}.yaml"


def write_fixture(name: str, obj: dict[str, Any]) -> None:
    """Store a live object: as JSON for the tests, as YAML in Argo CD's testdata layout."""
    import yaml

    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    (FIXTURE_DIR / f"{name}.json").write_text(text, encoding="utf-8")
    target = argo_testdata_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return data
