#!/usr/bin/env bash
# The cuda accelerator's checks on a machine with an NVIDIA GPU, in one go (the lent GPU machine
# gives a session one short slot: ../shared/device/README.md). From the repo root, after
# ../shared/device/pack:  bash .device-pack/run.sh bash bench/gpu_checks.sh [OUT_DIR]
# Each step logs to OUT_DIR/<step>.log and has its own time limit, so one slow or failing step
# leaves the others' results.
set -u
OUT=${1:-${OUT:-/tmp/gpu-checks}}
mkdir -p "$OUT"
B=build
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  want "$name" || return 0
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-14s rc=%-3s %4ss  %s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$*" | tee -a "$OUT/summary.txt"
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}
# STEPS (space-separated names) runs only those steps.
want() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi > "$OUT/nvidia-smi.log" 2>&1
step devices 30 $B/app/cli/deepwire devices
step cuda-tests 240 $B/tests/engine/engine_tests --gtest_filter='Cuda*:*OnCuda*'
step mlp-profile 60 env DEEPWIRE_PROFILE=1 DEEPWIRE_CUDNN_LOG=1 $B/app/cli/deepwire train resources/examples/fashion_mnist_mlp.dwproj --accelerator cuda --epochs 1 --max-steps 200 --quiet
step placement 60 env DEEPWIRE_PLACEMENT=1 $B/tests/engine/engine_tests --gtest_filter='CudaOps.GradientsMatchCpu'
step cnn-profile 90 env DEEPWIRE_PROFILE=1 $B/app/cli/deepwire train resources/examples/fashion_mnist_cnn.dwproj --accelerator cuda --epochs 1 --max-steps 900 --quiet
step cnn-profile-1024 90 env DEEPWIRE_PROFILE=1 DEEPWIRE_CUDNN_LOG=1 $B/app/cli/deepwire train resources/examples/fashion_mnist_cnn.dwproj --accelerator cuda --epochs 1 --batch-size 1024 --quiet
step mlp-10-epochs 150 $B/app/cli/deepwire train resources/examples/fashion_mnist_mlp.dwproj --accelerator cuda --epochs 10 --quiet
# A checkpoint written on cuda resumes on cpu, and one written on cpu resumes on cuda.
MLP=resources/examples/fashion_mnist_mlp.dwproj
step ckpt-cuda 60 $B/app/cli/deepwire train $MLP --accelerator cuda --epochs 1 --max-steps 100 --checkpoint "$OUT/ck-cuda" --quiet
step resume-cpu 60 $B/app/cli/deepwire train $MLP --accelerator cpu --epochs 2 --max-steps 100 --resume "$OUT/ck-cuda" --quiet
step ckpt-cpu 60 $B/app/cli/deepwire train $MLP --accelerator cpu --epochs 1 --max-steps 100 --checkpoint "$OUT/ck-cpu" --quiet
step resume-cuda 60 $B/app/cli/deepwire train $MLP --accelerator cuda --epochs 2 --max-steps 100 --resume "$OUT/ck-cpu" --quiet
step cnn-10-epochs 200 $B/app/cli/deepwire train resources/examples/fashion_mnist_cnn.dwproj --accelerator cuda --epochs 10 --quiet
# Each precision against PyTorch with the same setting (bf16: cuda autocast; tf32: TF32 on).
P=${PRECISIONS:-fp32,tf32,bf16}
step bench-mlp-1024 120 $B/bench/train_bench --accelerator cuda --model mlp --rounds 3 --steps 100 --batch 1024 --precision $P
step bench-cnn-1024 150 $B/bench/train_bench --accelerator cuda --model cnn --rounds 3 --steps 60 --batch 1024 --precision $P
step bench-mlp 120 $B/bench/train_bench --accelerator cuda --model mlp --rounds 3 --steps 300 --precision $P
step bench-cnn 120 $B/bench/train_bench --accelerator cuda --model cnn --rounds 2 --steps 100 --precision $P
step cnn-10-bf16 200 $B/app/cli/deepwire train resources/examples/fashion_mnist_cnn.dwproj --accelerator cuda --precision bf16 --epochs 10 --quiet
step conformance 150 $B/app/cli/deepwire conformance --accelerator cuda
# torchvision's resnet18 and mobilenet_v2 at batch 1 and 64 against PyTorch eager on this GPU.
step zoo-gpu 240 python3 bench/zoo/gpu_compare.py $B "$OUT/zoo" ${ZOO_ARGS:---rounds 3 --runs 20}
# Where the zoo's batch-64 time goes (run after zoo-gpu, which exports the models): per op type
# and per node, the first run (cuDNN's search) left out.
zoo_profile() {
  for m in "$OUT"/zoo/*_b64.onnx; do
    echo "== $m"
    DEEPWIRE_PROFILE=1 DEEPWIRE_CUDNN_LOG=1 $B/bench/zoo_bench "$m" "${m%.onnx}.input.npy" --accelerator cuda \
      --precision ${ZOO_PRECISION:-tf32} --runs 10 --warmup 2 2>&1 | grep -v '^{'
  done
}
export -f zoo_profile
export OUT B
step zoo-profile 120 bash -c zoo_profile
cat "$OUT/summary.txt"
