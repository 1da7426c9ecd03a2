#!/usr/bin/env bash
# Builds the Python package's wheel (maturin, abi3) into target/wheels and runs its CPU tests
# against the installed wheel: it imports without a GPU and raises its argument errors.
# Called by scripts/test.sh; the GPU checks are `scripts/gpu.sh python`.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=.deps/maturin
if [ ! -x "$TOOLS/bin/maturin" ]; then
  echo "python: installing maturin into $TOOLS" >&2
  python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS" "maturin>=1.5,<2" >&2
fi
rm -rf target/wheels
"$TOOLS/bin/maturin" build --release --locked --compatibility linux -m python/Cargo.toml -o target/wheels >&2
SITE=target/python-site
rm -rf "$SITE"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$SITE" target/wheels/kiln-*.whl >&2
KILN_REQUIRE_NATIVE=1 PYTHONPATH="$SITE" python3 -m unittest discover -s python/tests -p 'test_*.py' -v 2>&1 | tail -n 40
