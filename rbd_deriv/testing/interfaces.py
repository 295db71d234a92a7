"""ROS interface packages built for a test against this Python environment's ROS wheels.

Some message packages every ROS installation has are not on PyPI (tf2_msgs). A test that needs one of them
builds it here from its definition (the same package and type names, so the same type on the wire as a ROS
installation's) with CMake and the rosidl generators of the environment, installs it in a folder of its own and
runs the processes that use it with :func:`environment_with`. Nothing is installed into the environment itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, Sequence

__all__ = ["build_interfaces", "environment_with"]

_PACKAGE_XML = """<?xml version="1.0"?>
<package format="3">
  <name>{name}</name>
  <version>0.0.0</version>
  <description>{name}, built for a test</description>
  <maintainer email="test@example.com">test</maintainer>
  <license>BSD-3-Clause</license>
  <buildtool_depend>ament_cmake</buildtool_depend>
  <buildtool_depend>rosidl_default_generators</buildtool_depend>
{depends}
  <member_of_group>rosidl_interface_packages</member_of_group>
  <export><build_type>ament_cmake</build_type></export>
</package>
"""

# The wheels' CMake exports name the include folders of the machine that built them; the Python-binding targets
# get this interpreter's instead (CMakeLists.txt of the package does the same for its own messages).
_CMAKE = """cmake_minimum_required(VERSION 3.20)
project({name})
find_package(ament_cmake REQUIRED)
find_package(rosidl_default_generators REQUIRED)
{find_dependencies}
find_package(Python3 REQUIRED COMPONENTS Interpreter Development NumPy)
rosidl_generate_interfaces(${{PROJECT_NAME}} {files} DEPENDENCIES {dependencies})
get_directory_property(_imported_targets IMPORTED_TARGETS)
foreach(_target IN LISTS _imported_targets)
  if(_target MATCHES "__rosidl_generator_py$")
    get_target_property(_includes ${{_target}} INTERFACE_INCLUDE_DIRECTORIES)
    set(_kept "")
    foreach(_dir IN LISTS _includes)
      if(EXISTS "${{_dir}}")
        list(APPEND _kept "${{_dir}}")
      endif()
    endforeach()
    list(APPEND _kept ${{Python3_INCLUDE_DIRS}} ${{Python3_NumPy_INCLUDE_DIRS}})
    set_target_properties(${{_target}} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${{_kept}}")
  endif()
endforeach()
ament_package()
"""


def build_interfaces(name: str, messages: Dict[str, str], dependencies: Sequence[str], root: Path) -> Path:
    """Build the interface package ``name`` with ``messages`` ({type name: its .msg text}), which use the message
    packages ``dependencies`` (installed in this environment), in folder ``root``; return its install prefix.

    Raises:
        RuntimeError: CMake failed (its output in the message).
    """
    source, build, install = root / "src" / name, root / "build", root / "install"
    (source / "msg").mkdir(parents=True, exist_ok=True)
    for type_name, text in messages.items():
        (source / "msg" / f"{type_name}.msg").write_text(text, encoding="utf-8")
    (source / "package.xml").write_text(_PACKAGE_XML.format(
        name=name, depends="\n".join(f"  <depend>{d}</depend>" for d in dependencies)), encoding="utf-8")
    (source / "CMakeLists.txt").write_text(_CMAKE.format(
        name=name, find_dependencies="\n".join(f"find_package({d} REQUIRED)" for d in dependencies),
        files=" ".join(f'"msg/{t}.msg"' for t in messages), dependencies=" ".join(dependencies)), encoding="utf-8")
    environment = dict(os.environ, AMENT_PREFIX_PATH=sys.prefix, CMAKE_PREFIX_PATH=sys.prefix)
    commands = (["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_INSTALL_PREFIX={install}",
                 f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF"],
                ["cmake", "--build", str(build), "-j", "2"], ["cmake", "--install", str(build)])
    for command in commands:
        completed = subprocess.run(command, env=environment, capture_output=True, text=True)
        if completed.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:2])} of {name} failed:\n{completed.stdout[-3000:]}"
                               f"\n{completed.stderr[-3000:]}")
    return install


def environment_with(prefix: Path) -> Dict[str, str]:
    """This process's environment with the package installed at ``prefix`` found by a new Python process: its
    Python modules on PYTHONPATH, its libraries on LD_LIBRARY_PATH (where the middleware loads them by name)."""
    version = sysconfig.get_python_version()
    modules = [str(p) for p in (prefix / "lib" / f"python{version}" / "site-packages",
                                prefix / "local" / "lib" / f"python{version}" / "dist-packages") if p.is_dir()]

    def joined(variable: str, first: Sequence[str]) -> str:
        return os.pathsep.join([*first, *filter(None, [os.environ.get(variable, "")])])
    return dict(os.environ, PYTHONPATH=joined("PYTHONPATH", modules),
                LD_LIBRARY_PATH=joined("LD_LIBRARY_PATH", [str(prefix / "lib")]),
                AMENT_PREFIX_PATH=joined("AMENT_PREFIX_PATH", [str(prefix)]))
