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
