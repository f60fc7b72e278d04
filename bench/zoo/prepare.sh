# Sourced by bench/zoo/run and bench/ops/run: installs what they need (python3-torchvision,
# nodejs, npm; onnxruntime-node into the build folder) and builds zoo_bench. Sets ZOO.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
PACKAGES+=(python3-torchvision)
# A machine with its own Node.js (NodeSource's nodejs bundles npm and conflicts with Debian's npm)
# keeps it.
command -v node > /dev/null || PACKAGES+=(nodejs)
command -v npm > /dev/null || PACKAGES+=(npm)
install_missing
ZOO="$BUILD/bench/zoo"
mkdir -p "$ZOO"
if [ ! -d "$ZOO/ort/node_modules/onnxruntime-node" ]; then
  # --ignore-scripts: the install script fetches GPU binaries and fails here; the CPU library
  # ships inside the package.
  npm install --silent --ignore-scripts --prefix "$ZOO/ort" onnxruntime-node@1.30.0
fi
if [ ! -x "$BUILD/bench/zoo_bench" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$BUILD" --target zoo_bench --parallel 2
fi
