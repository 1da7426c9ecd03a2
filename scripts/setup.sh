#!/usr/bin/env bash
# Installs what kiln needs beyond cargo into the repository (nothing system-wide): NVRTC 13.0.88
# (to compile kernels, also without a GPU) and cuobjdump/nvdisasm (SASS inspection), as PyPI
# wheels under .deps/py. Safe to run again: it does nothing when they are present.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=.deps/py
if [ ! -f "$DEPS/nvidia/cu13/lib/libnvrtc.so.13" ] || [ ! -x "$DEPS/nvidia/cu13/bin/cuobjdump" ]; then
  echo "setup: installing NVRTC and the SASS tools into $DEPS" >&2
  python3 -m pip install --quiet --disable-pip-version-check --target "$DEPS" --upgrade \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 >&2
fi
test -f "$DEPS/nvidia/cu13/lib/libnvrtc.so.13" || { echo "setup: NVRTC did not install into $DEPS" >&2; exit 1; }
# Headless Chromium for the report's browser test: only when asked (KILN_BROWSER_TESTS=1) or in CI,
# and only if missing. apt-get needs root (CI containers run as root).
if [ "${KILN_BROWSER_TESTS:-}" = 1 ] || [ -n "${CI:-}" ]; then
  if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    echo "setup: installing chromium (headless browser test of kiln report)" >&2
    apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >&2
  fi
fi
