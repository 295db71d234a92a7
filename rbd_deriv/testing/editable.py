"""Child processes that must import another copy of rbd_deriv than this environment's editable install.

An editable pip install (``./run setup``) imports the package through a hook on ``sys.meta_path``, which a
``.pth`` file of site-packages installs when Python starts and which comes before PYTHONPATH: a child given
another copy on PYTHONPATH (a colcon install space, a modified copy of the sources) would still get the
source tree. An empty module of the hook's name first on PYTHONPATH is what the ``.pth`` line then imports,
so the child sees the environment as it would be without the editable install.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path
from typing import List

__all__ = ["editable_hooks", "hook_free_path"]


def editable_hooks() -> List[str]:
    """Modules that .pth files of this environment import to install an editable hook for rbd_deriv."""
    site = os.path.join(sys.prefix, f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages")
    names = []
    for pth in glob.glob(os.path.join(site, "*rbd_deriv*.pth")):
        for line in Path(pth).read_text().splitlines():
            match = re.match(r"import (\w+)$", line.strip())
            if match:
                names.append(match.group(1))
    return names


def hook_free_path(folder: Path) -> str:
    """Create ``folder`` holding empty stand-ins for the hooks; returns it, to put first on a child's
    PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in editable_hooks():
        (folder / f"{name}.py").write_text("# stands in for the editable install's import hook\n")
    return str(folder)
