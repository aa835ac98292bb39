"""Provide ansible-test's pip bootstrap script without its download site.

ansible-test bootstraps pip into each sanity venv by running a ``get-pip`` script that it
downloads once into ``~/.ansible/test/cache/get_pip_X_Y.py``. That site is unreachable
here, while the package index is not. This writes a stand-in of our own into that cache:
it runs the pip wheel that CPython bundles for ``ensurepip`` to install the exact pip
version ansible-test asks for from the package index.
"""

from __future__ import annotations

import pathlib
import re

import ansible_test

STAND_IN = '''\
"""Stand-in for get-pip.py written by gpuops.training's tests/tools/offline_get_pip.py."""
import glob
import os
import sys

import ensurepip

wheels = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))
if not wheels:
    sys.exit("no bundled pip wheel in ensurepip; cannot bootstrap pip")
sys.path.insert(0, wheels[0])
from pip._internal.cli.main import main  # noqa: E402

# get-pip.py takes pip install arguments plus a few options of its own.
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--upgrade", *args]))
'''


def wanted_pip_version() -> str:
    source = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    match = re.search(r"pip='(\d+(?:\.\d+)*)'", source.read_text())
    if not match:
        raise SystemExit(f"cannot find the pip version ansible-test wants in {source}")
    return match.group(1)


def main() -> None:
    version = wanted_pip_version()
    cache = pathlib.Path.home() / ".ansible" / "test" / "cache"
    target = cache / f"get_pip_{version.replace('.', '_')}.py"
    if target.exists() and target.read_text() == STAND_IN:
        return
    cache.mkdir(parents=True, exist_ok=True)
    target.write_text(STAND_IN)
    print(f"wrote pip {version} bootstrap stand-in to {target}")


if __name__ == "__main__":
    main()
