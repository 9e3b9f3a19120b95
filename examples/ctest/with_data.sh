#!/usr/bin/env bash
# examples/ctest/with_data.sh — runs a command only when Fashion-MNIST is installed; otherwise
# exits 77, which ctest reports as "skipped" (SKIP_RETURN_CODE 77).
#   with_data.sh COMMAND [ARGS...]
dir=${MINIDL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$dir/train-images-idx3-ubyte.gz" ] && [ ! -f "$dir/train-images-idx3-ubyte" ]; then
  echo "skipped: Fashion-MNIST is not installed in $dir (apt-get install dataset-fashion-mnist)"
  exit 77
fi
exec "$@"
