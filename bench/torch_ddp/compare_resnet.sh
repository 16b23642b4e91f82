#!/usr/bin/env bash
# ResNet-18 training throughput, chorus vs PyTorch DDP, in one run (docs/torch.md): the
# second model of issue 22's bars, with many gradient tensors (62) and 46.8 MB of them.
#
# chorus: build/examples/resnet_synthetic (Trainer.fit under MultiWorkerMirroredStrategy,
# gradients in shared-memory buckets) under chorusrun; DDP: ddp_resnet.py, torchvision's
# resnet18 with the gloo backend. Both: synthetic 3 x P x P images, per-worker batch B, SGD
# with momentum, one intra-op thread per worker, the first W steps left out. Configurations
# chorus-1, chorus-2, ddp-1, ddp-2 and solo-2 (two single-worker chorus jobs at once, their
# rates summed: what two workers do here without communicating) run --repeat times,
# interleaved; medians are reported, each with the hypervisor's steal time and the cores'
# round trip (measure.sh), and the medians of each run's own ratios. Bars: chorus-2 >=
# 0.95x solo-2 and >= 1.3x ddp-2.
#
#   bench/torch_ddp/compare_resnet.sh [--build DIR] [--steps N] [--warmup W] [--batch B]
#                                     [--image-size P] [--repeat R]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../measure.sh"
build="$here/../../build"
steps=20
warmup=3
batch=8
image=224
repeat=5
python=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --image-size) image=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "compare_resnet.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
training_setup "$build" examples/resnet_synthetic
"$python" -c 'import torchvision' 2>/dev/null ||
  { echo "DDP side needs torchvision for $python (apt-get install python3-torchvision)" >&2; exit 1; }
blas_setup "$python"

chorus_rate() {  # workers -> images/s
  "$chorusrun" -np "$1" "$example" --steps "$steps" --warmup-steps "$warmup" --batch "$batch" \
      --image-size "$image" --threads 1 2>&1 | sed -n 's/.* \([0-9.]*\) images\/s over.*/\1/p'
}
ddp_rate() {
  "$python" "$here/ddp_resnet.py" --workers "$1" --steps "$steps" --warmup-steps "$warmup" \
      --batch "$batch" --image-size "$image" --threads 1 2>&1 |
    sed -n 's/.*images_per_s=\([0-9.]*\).*/\1/p'
}

echo "# compare_resnet: ResNet-18, ${image}px, batch $batch/worker, $steps steps after $warmup, repeat $repeat"
echo "# CPU: $(cpu_model); $(getconf _NPROCESSORS_ONLN) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# OpenBLAS core: ${blas_core:-unknown}; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
declare -a c1 c2 d1 d2 s2 vs_solo vs_ddp
for ((i = 1; i <= repeat; i++)); do
  line="# run $i:"
  measure chorus_rate 1; c1+=("$rate"); line+="  chorus-1 $rate (steal $steal%, cores $cores ns)"
  measure chorus_rate 2; c2+=("$rate"); line+="  chorus-2 $rate ($steal%, $cores ns)"
  measure ddp_rate 1; d1+=("$rate"); line+="  ddp-1 $rate ($steal%, $cores ns)"
  measure ddp_rate 2; d2+=("$rate"); line+="  ddp-2 $rate ($steal%, $cores ns)"
  measure two_at_once chorus_rate 1; s2+=("$rate"); line+="  solo-2 $rate ($steal%, $cores ns)"
  vs_solo+=("$(ratio "${c2[-1]}" "${s2[-1]}")")
  vs_ddp+=("$(ratio "${c2[-1]}" "${d2[-1]}")")
  echo "$line"
done
awk -v c1="$(median "${c1[@]}")" -v c2="$(median "${c2[@]}")" -v d1="$(median "${d1[@]}")" \
    -v d2="$(median "${d2[@]}")" -v s2="$(median "${s2[@]}")" \
    -v rs="$(median "${vs_solo[@]}")" -v rd="$(median "${vs_ddp[@]}")" 'BEGIN {
  printf "%-10s %8s %10s\n", "system", "workers", "images/s";
  printf "%-10s %8d %10.2f\n%-10s %8d %10.2f\n", "chorus", 1, c1, "chorus", 2, c2;
  printf "%-10s %8d %10.2f\n%-10s %8d %10.2f\n", "ddp-gloo", 1, d1, "ddp-gloo", 2, d2;
  printf "%-10s %8d %10.2f\n", "solo-2", 2, s2;
  printf "chorus-2 / solo-2 = %.2fx (bar >= 0.95: %s); chorus-2 / ddp-2 = %.2fx (bar >= 1.3: %s)\n",
         c2 / s2, (c2 / s2 >= 0.95 ? "met" : "NOT met"), c2 / d2, (c2 / d2 >= 1.3 ? "met" : "NOT met");
  printf "medians of each run'"'"'s own ratios: chorus-2 / solo-2 = %.2fx, chorus-2 / ddp-2 = %.2fx\n", rs, rd;
  printf "solo-2 / ddp-2 = %.2fx: chorus-2 / ddp-2 if chorus-2 ran as fast as solo-2 (no communication)\n", s2 / d2;
}'
