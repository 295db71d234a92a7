"""The package's interfaces (msg/, srv/) as built, and the agreement of its two build descriptions.

The generated Python types must carry the fields the .msg/.srv files declare, with their types, and
survive a serialization round trip bit for bit; the colcon build (CMakeLists.txt, package.xml) and the
pip build (pyproject.toml) must declare the same version, interfaces and node executables.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11
    tomllib = pytest.importorskip("tomli")


def _interface_files():
    return sorted((ROOT / "msg").glob("*.msg")) + sorted((ROOT / "srv").glob("*.srv"))


def _declared_fields(text: str):
    """(type, name) of each field of a .msg text (or of one half of a .srv)."""
    fields = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            kind, name = line.split()[:2]
            fields.append((kind, name))
    return fields


def test_cmake_lists_every_interface_file():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    listed = set(re.findall(r'"((?:msg|srv)/\w+\.(?:msg|srv))"', cmake))
    on_disk = {str(p.relative_to(ROOT)) for p in _interface_files()}
    assert listed == on_disk


def test_versions_and_entry_points_agree():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_xml = (ROOT / "package.xml").read_text()
    assert re.search(r"<name>(.*)</name>", package_xml).group(1) == pyproject["project"]["name"] == "rbd_deriv"
    assert re.search(r"<version>(.*)</version>", package_xml).group(1) == pyproject["project"]["version"]
    cmake = (ROOT / "CMakeLists.txt").read_text()
    block = re.search(r"set\(_node_entry_points(.*?)\)", cmake, re.S).group(1)
    colcon_scripts = dict(re.findall(r'"([^"=]+)=([^"]+)"', block))
    assert colcon_scripts == pyproject["project"]["scripts"]
    for target in colcon_scripts.values():
        module, function = target.split(":")
        path = ROOT / (module.replace(".", "/") + ".py")
        assert re.search(rf"^def {function}\(", path.read_text(), re.M), target


msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built (pip install -e . or colcon build)")
srv = pytest.importorskip("rbd_deriv.srv")
serialization = pytest.importorskip("rclpy.serialization")

_PYTHON_TYPES = {"float64[]": "sequence<double>", "string[]": "sequence<string>", "uint32": "uint32",
                 "float64": "double", "bool": "boolean", "string": "string",
                 "std_msgs/Header": "std_msgs/Header", "Matrix": "rbd_deriv/Matrix",
                 "Linearization": "rbd_deriv/Linearization"}


def _check_fields(generated_type, declared):
    types = generated_type.get_fields_and_field_types()
    assert list(types) == [name for _, name in declared]
    for kind, name in declared:
        assert types[name] == _PYTHON_TYPES[kind], (name, types[name], kind)


@pytest.mark.parametrize("name", ["Matrix", "Linearization", "FeedbackPolicy"])
def test_message_fields_match_definition(name):
    _check_fields(getattr(msg, name), _declared_fields((ROOT / "msg" / f"{name}.msg").read_text()))


def test_service_fields_match_definition():
    request_text, response_text = (ROOT / "srv" / "ComputeDerivatives.srv").read_text().split("---")
    _check_fields(srv.ComputeDerivatives.Request, _declared_fields(request_text))
    _check_fields(srv.ComputeDerivatives.Response, _declared_fields(response_text))


def test_round_trip_is_exact():
    rng = np.random.default_rng(0)
    lin = msg.Linearization(joint_names=["a", "b"], dt=1e-3, nx=4, nu=2, nq=2, nv=2)
    lin.header.stamp.sec, lin.header.stamp.nanosec, lin.header.frame_id = 12, 345, "base"
    lin.x, lin.u, lin.x_next = rng.normal(size=4).tolist(), rng.normal(size=2).tolist(), rng.normal(size=4).tolist()
    lin.a, lin.b = rng.normal(size=16).tolist(), (rng.normal(size=8) * 1e-300).tolist()
    back = serialization.deserialize_message(serialization.serialize_message(lin), msg.Linearization)
    assert back == lin
    response = srv.ComputeDerivatives.Response(success=False, message="q has 6 entries", linearization=lin)
    response.mass_matrix = msg.Matrix(name="M", names=["a", "b"], rows=2, cols=2, data=[1.0, -0.5, -0.5, 2.0])
    back = serialization.deserialize_message(serialization.serialize_message(response),
                                             srv.ComputeDerivatives.Response)
    assert back == response
    assert back.mass_matrix.data.tolist() == [1.0, -0.5, -0.5, 2.0]


def _requirement_name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503: lower case, runs of -_. as -)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_extra_named_in_the_sources_and_docs_exists_and_test_holds_them_all():
    extras = _project()["optional-dependencies"]
    named = set()
    for path in [*(ROOT / "rbd_deriv").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        named.update(re.findall(r"rbd_deriv\[([a-z,]+)\]", path.read_text(encoding="utf-8")))
    named = {extra for group in named for extra in group.split(",")}
    assert {"sim", "replay", "legged", "fleet", "test"} <= named, named
    assert named <= set(extras), f"named but not declared: {named - set(extras)}"
    test = {_requirement_name(r) for r in extras["test"]}
    for extra, requirements in extras.items():
        missing = {_requirement_name(r) for r in requirements} - test
        assert not missing, f"[test] lacks {missing} of [{extra}]"


#: Imported modules that need no declaration, and why.
NOT_DECLARED = {
    "compression": "standard library from Python 3.14 (replay/storage.py falls back to backports.zstd before)",
    "crocoddyl": "bench/crocoddyl_legged.py runs in Crocoddyl's own environment (bench legged --crocoddyl-python)",
}
#: Modules whose distribution's metadata does not list them: pin installs pinocchio under cmeel.prefix, put
#: on the path by a .pth file.
PROVIDED_BY = {"pinocchio": "pin"}


def test_every_third_party_module_the_package_imports_is_declared():
    """Each module imported anywhere in rbd_deriv/ (at the top or inside a function) from outside the standard
    library belongs to a distribution that pyproject.toml declares, as a dependency or in an extra."""
    import ast
    import importlib.metadata

    project = _project()
    declared = {_requirement_name(r) for r in project["dependencies"]}
    for requirements in project["optional-dependencies"].values():
        declared.update(_requirement_name(r) for r in requirements)
    imported = set()
    for path in (ROOT / "rbd_deriv").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = sorted(imported - set(sys.stdlib_module_names) - set(NOT_DECLARED) - {"rbd_deriv"})
    providers = importlib.metadata.packages_distributions()
    undeclared, resolved = {}, set()
    for module in third_party:
        distributions = {_requirement_name(d) for d in providers.get(module, [PROVIDED_BY.get(module, "")]) if d}
        # A module with no distribution metadata (a ROS installation's rclpy and messages, a package absent
        # here) cannot be judged; the pip environment of CI has metadata for all of them.
        if distributions:
            resolved.add(module)
            if not distributions & declared:
                undeclared[module] = sorted(distributions)
    assert {"numpy", "numba", "scipy"} <= resolved, resolved
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
