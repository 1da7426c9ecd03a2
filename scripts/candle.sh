#!/usr/bin/env bash
# Builds kiln-candle (kiln's kernels as candle custom ops) where no CUDA toolkit is installed.
#
#   bash scripts/candle.sh [cargo subcommand and args]   (default: build --release -p kiln-candle --examples)
#   bash scripts/candle.sh env                            prints the environment, for `eval`
#   bash scripts/candle.sh test --release -p kiln-candle --lib   the crate's CPU tests (argument
#                                                         checks, the 4-bit prepack), no GPU needed
#
# candle's `cuda` feature compiles candle-kernels with nvcc (through cudaforge) and links cudarc
# at build time (`dynamic-linking`) against libcuda, libcudart, libnvrtc, libcublas(Lt) and
# libcurand. kiln itself needs none of this (it loads NVRTC at run time), so only this crate
# does. Everything comes from PyPI's CUDA 13.0 wheels, installed under .deps/cuda13 (apart from
# .deps/py, which kiln searches for NVRTC at run time):
#   nvcc, ptxas, fatbinary (nvidia-cuda-nvcc), cicc (nvidia-nvvm), the crt headers
#   (nvidia-cuda-crt), the runtime headers and libcudart (nvidia-cuda-runtime), CCCL
#   (nvidia-cuda-cccl), NVRTC, cuBLAS and cuRAND (the libraries the link names).
# The wheels carry only versioned libraries (libcudart.so.13): the unversioned names the linker
# asks for (-lcudart) are made as links beside them. No wheel carries libcuda (the driver's):
# the link gets a stub, lib/stubs/libcuda.so (SONAME libcuda.so.1), with an empty function for
# every `cu*` entry point cuda.h declares; at run time the driver's own libcuda.so.1 is loaded.
# With no GPU to ask, CUDA_COMPUTE_CAP=90 (sm_90 for candle's kernels) and CUDARC_CUDA_VERSION
# (13000) are set here. CUDAFORGE_THREADS follows CARGO_BUILD_JOBS (nvcc runs one per thread).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD/.deps/cuda13
CU=$ROOT/nvidia/cu13
WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35)

if [ ! -x "$CU/bin/nvcc" ] || [ ! -x "$CU/nvvm/bin/cicc" ] || [ ! -f "$CU/lib/libcublasLt.so.13" ] \
  || [ ! -f "$CU/lib/libcurand.so.10" ] || [ ! -f "$CU/include/cuda_runtime.h" ]; then
  echo "candle: installing the CUDA 13.0 build pieces into $ROOT (about 600 MB of wheels)" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$ROOT" --upgrade \
    "${WHEELS[@]}" >&2
fi
for f in bin/nvcc nvvm/bin/cicc include/cuda_runtime.h include/crt/host_config.h \
  lib/libcudart.so.13 lib/libnvrtc.so.13 lib/libcublas.so.13 lib/libcublasLt.so.13 lib/libcurand.so.10; do
  test -e "$CU/$f" || { echo "candle: $CU/$f is missing after installing ${WHEELS[*]}: remove $ROOT and run again" >&2; exit 1; }
done
# The unversioned names the linker looks for.
for l in cudart.so.13 nvrtc.so.13 cublas.so.13 cublasLt.so.13 curand.so.10; do
  ln -sfn "lib$l" "$CU/lib/lib${l%.so.*}.so"
done
# The link-time stand-in for the driver's libcuda (never loaded: its SONAME names the driver's).
STUB=$CU/lib/stubs/libcuda.so
if [ ! -f "$STUB" ] || [ "$CU/include/cuda.h" -nt "$STUB" ]; then
  mkdir -p "$CU/lib/stubs"
  gen=$(mktemp -d)
  # The preprocessed header names each entry point as the library exports it (cuMemAlloc is
  # #defined to cuMemAlloc_v2, ...): every `cuXxx(` that opens a declaration.
  cc -E -P -D__CUDA_API_VERSION_INTERNAL=0 "$CU/include/cuda.h" \
    | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | sed 's/[[:space:](]//g' | sort -u \
    | awk '{print "void " $1 "(void) {}"}' >"$gen/stub.c"
  test "$(wc -l <"$gen/stub.c")" -gt 300 || { echo "candle: found too few entry points in cuda.h for the libcuda stub" >&2; exit 1; }
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB" "$gen/stub.c"
  rm -rf "$gen"
fi

jobs=${CARGO_BUILD_JOBS:-$(nproc)}
vars=(
  "NVCC=$CU/bin/nvcc"
  "CUDA_HOME=$CU"
  "CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}"
  "CUDARC_CUDA_VERSION=13000"
  "CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$jobs}"
  "PATH=$CU/bin:$PATH"
)
if [ "${1:-}" = env ]; then
  printf 'export %q\n' "${vars[@]}"
  exit 0
fi
export "${vars[@]}"
if [ $# -eq 0 ]; then
  set -- build --release -p kiln-candle --examples
fi
if [ "$1" = test ]; then
  # The test binaries link the CUDA libraries as the example does: the wheels' at run time, and
  # where no driver is installed (the CPU box) the stub as libcuda.so.1 (the CPU tests never call
  # the driver; with a driver present the driver's own is loaded).
  LD_LIBRARY_PATH="$CU/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    ln -sfn libcuda.so "$CU/lib/stubs/libcuda.so.1"
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CU/lib/stubs"
  fi
  export LD_LIBRARY_PATH
fi
exec cargo "$@"
