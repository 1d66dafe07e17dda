#!/usr/bin/env bash
# Creates, once, the venv the Ray driver runs in: ~/.cache/autoballoon/venv-ray-<version>,
# <version> being the exact pin in requirements.txt (a new pin makes a new venv; nothing goes
# into the repository). Prints the venv's python. AUTOBALLOON_CACHE moves the cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(sed -n 's/^ray==\([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$here/requirements.txt")
if [ -z "$version" ]; then
    echo "setup.sh: $here/requirements.txt pins no exact ray==X.Y.Z" >&2
    exit 2
fi
venv="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/venv-ray-$version"
# .complete is written last: a venv whose install was cut short is made again.
if [ ! -f "$venv/.complete" ]; then
    echo "setup.sh: creating $venv (ray $version from PyPI)" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    "$venv/bin/python" -c "import ray, sys; sys.exit(ray.__version__ != '$version')"
    touch "$venv/.complete"
fi
echo "$venv/bin/python"
