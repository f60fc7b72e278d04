# Shared by scripts/run and scripts/test: install what is missing, then configure and build.
# Sourced, not executed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"

# The Debian bookworm packages deepwire builds, tests and runs with (see DEVELOPERS.md).
PACKAGES=(
  cmake g++ make pkg-config
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev
  libdnnl-dev opencl-headers ocl-icd-opencl-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev zlib1g-dev
  libpng-dev libjpeg-dev libre2-dev
  libopenmpi-dev openmpi-bin
  iproute2 procps
  libonnx-testdata dataset-fashion-mnist
  python3 python3-onnx python3-torch python3-numpy
  xvfb xauth
)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "deepwire: installing missing packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build_all() {
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD" --parallel 2
}
