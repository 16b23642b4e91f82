#!/usr/bin/env bash
# A real Slurm (Debian's munge, slurmctld, slurmd) on this machine, private to the test (its
# own munge key and socket, configuration, ports, spool and state under a temporary
# directory), and chorus training fashion_mnist on it:
#   1. one node (this host): `srun -n 2 fashion_mnist` trains; `sbatch` of the sbatch template
#      (examples/slurm/train.sbatch, secret file included) trains and writes its output file;
#      chorusrun inside `salloc -n 2` with -np 4 exits 2 naming the allocation, -np 2 trains;
#   2. two nodes, node1 and node2, each a slurmd in its own network and UTS namespace on a
#      bridge: `srun -N 2 -n 4` trains with 4 workers on 2 hosts (cross_size 2) over TCP
#      between the namespaces (bytes counted on the veth links); the same step without a
#      secret fails at once saying what to export; the sbatch template trains on both nodes.
# Everything started is stopped and removed on exit, also on failure.
#
# usage: run_slurm_test.sh --fashion-mnist PATH --chorusrun PATH --sbatch-template PATH
# Exit 0: all passed; 1: a check failed; 77 (ctest's SKIP_RETURN_CODE): not root, or part 2
# could not run here (part 1 then ran and passed; the reason is printed).
set -euo pipefail

SKIP=77
START=$SECONDS
log() { echo "slurm_test [$((SECONDS - START)) s]: $*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --fashion-mnist) FASHION_MNIST=$2 ;;
    --chorusrun) CHORUSRUN=$2 ;;
    --sbatch-template) TEMPLATE=$2 ;;
    *) fail "unknown argument $1" ;;
  esac
  shift 2
done
: "${FASHION_MNIST:?--fashion-mnist}" "${CHORUSRUN:?--chorusrun}" "${TEMPLATE:?--sbatch-template}"

if [ "$(id -u)" -ne 0 ]; then
  log "SKIPPED: needs root (slurmd starts the tasks as their user; namespaces)"
  exit $SKIP
fi
for tool in munged mungekey slurmctld slurmd srun sbatch salloc sinfo scancel ip unshare nsenter; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/setup installs Slurm and munge)"
done

# A short run: enough steps to see the loss fall, few enough for a 2-core machine.
TRAIN_ARGS=(--epochs 1 --max-steps 40 --threads 1 --skip-test)
export CHORUS_TIMEOUT_SECONDS=60 OMP_NUM_THREADS=1

WORK=$(mktemp -d /tmp/chorus-slurm.XXXXXX)
chmod 755 "$WORK"
HOST=$(hostname -s)
TAG=$$
NET="10.$((150 + TAG % 50)).$((TAG / 50 % 250))"  # a /24 of our own, .1 the bridge
NS1="chorus_slurm${TAG}_1" NS2="chorus_slurm${TAG}_2" BRIDGE="csl${TAG}b"
PIDS=()
NETNS_MADE=0

cleanup() {
  local rc=$?
  set +e
  if [ -f "$WORK/slurm.conf" ]; then
    SLURM_CONF="$WORK/slurm.conf" scancel --quiet --full --user=root 2>/dev/null
    sleep 1
  fi
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [ -f "$WORK/munge/munged.pid" ] && kill "$(cat "$WORK/munge/munged.pid")" 2>/dev/null
  if [ "$NETNS_MADE" = 1 ]; then
    for k in 1 2; do
      ip link del "csl${TAG}o$k" 2>/dev/null  # both ends of the pair
      ip netns del "chorus_slurm${TAG}_$k" 2>/dev/null
    done
    ip link del "$BRIDGE" 2>/dev/null
  fi
  if [ $rc -ne 0 ] && [ $rc -ne $SKIP ]; then
    for f in "$WORK"/*.log "$WORK"/*.out; do
      [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 15 "$f"; } >&2
    done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the namespaces: can part 2 run here? ------------------------------------------------
NETNS_WHY=""
make_namespaces() {
  ip netns add "$NS1" 2>"$WORK/netns.err" || {
    NETNS_WHY="'ip netns add' failed: $(cat "$WORK/netns.err")"
    return 1
  }
  NETNS_MADE=1
  unshare --uts true 2>"$WORK/netns.err" || {
    NETNS_WHY="'unshare --uts' failed: $(cat "$WORK/netns.err")"
    return 1
  }
  ip netns add "$NS2" &&
    ip link add "$BRIDGE" type bridge && ip addr add "$NET.1/24" dev "$BRIDGE" &&
    ip link set "$BRIDGE" up || {
    NETNS_WHY="cannot make the bridge $BRIDGE"
    return 1
  }
  local k ns
  for k in 1 2; do
    ns="chorus_slurm${TAG}_$k"
    ip link add "csl${TAG}o$k" type veth peer name "csl${TAG}i$k" netns "$ns" &&
      ip link set "csl${TAG}o$k" master "$BRIDGE" && ip link set "csl${TAG}o$k" up &&
      ip -n "$ns" addr add "$NET.$((k + 1))/24" dev "csl${TAG}i$k" &&
      ip -n "$ns" link set "csl${TAG}i$k" up && ip -n "$ns" link set lo up || {
      NETNS_WHY="cannot link namespace $ns to the bridge"
      return 1
    }
  done
  # Mounted over /etc/hosts in the nodes' own mount namespaces: the names resolve there.
  printf '127.0.0.1 localhost\n%s %s\n%s node1\n%s node2\n' "$NET.1" "$HOST" "$NET.2" \
    "$NET.3" >"$WORK/hosts"
}
if make_namespaces; then TWO_NODES=1; else TWO_NODES=0; fi
CTL_ADDR=$([ $TWO_NODES = 1 ] && echo "$NET.1" || echo 127.0.0.1)

# ---- munge -------------------------------------------------------------------------------
mkdir -p "$WORK/munge" "$WORK/state" "$WORK/spool/$HOST"
chmod 700 "$WORK/munge"
mungekey --create --keyfile="$WORK/munge/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$WORK/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$WORK/munge/munge.key"
chmod 755 "$WORK/munge"  # the socket's directory: clients must reach the socket
munged --force --key-file="$WORK/munge/munge.key" --socket="$WORK/munge/munge.sock" \
  --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/munged.log" \
  --seed-file="$WORK/munge/seed" || fail "munged did not start"

# ---- slurm.conf: no cgroups, no accounting, ports of our own ------------------------------
free_port() {
  local p
  for p in $(shuf -i 16000-16999 -n 50); do
    if ! ss -Hltn "sport = :$p" | grep -q . && ! ss -Hltn "sport = :$((p + 1))" | grep -q .; then
      echo "$p"
      return
    fi
  done
  fail "no free port pair in 16000-16999"
}
PORT=$(free_port)
{
  cat <<EOF
ClusterName=chorustest
SlurmctldHost=$HOST($CTL_ADDR)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.%n.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
  if [ $TWO_NODES = 1 ]; then
    cat <<EOF
NodeName=node1 NodeAddr=$NET.2 NodeHostname=node1 CPUs=2 State=UNKNOWN
NodeName=node2 NodeAddr=$NET.3 NodeHostname=node2 CPUs=2 State=UNKNOWN
PartitionName=pair Nodes=node1,node2 MaxTime=INFINITE State=UP
EOF
  fi
} >"$WORK/slurm.conf"
export SLURM_CONF="$WORK/slurm.conf"
unset SLURM_JOB_ID SLURM_JOBID SLURM_STEP_ID SLURM_PROCID  # not a step of some outer Slurm

# ---- the daemons, in the foreground (-D) as our children ----------------------------------
slurmctld -D -f "$SLURM_CONF" >"$WORK/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" -N "$HOST" >"$WORK/slurmd.out" 2>&1 &
PIDS+=($!)
if [ $TWO_NODES = 1 ]; then
  for k in 1 2; do
    mkdir -p "$WORK/spool/node$k"
    # nsenter, not `ip netns exec`: that one mounts a fresh /sys without the cgroup
    # hierarchies, and slurmd 22.05 will not start without them even with
    # proctrack/linuxproc. Own mount namespace for /etc/hosts, own UTS one for the name.
    nsenter --net="/run/netns/chorus_slurm${TAG}_$k" unshare --mount --uts sh -c \
      "mount --bind '$WORK/hosts' /etc/hosts && hostname node$k &&
       exec slurmd -D -f '$SLURM_CONF' -N node$k" >"$WORK/slurmd-node$k.out" 2>&1 &
    PIDS+=($!)
  done
fi

wait_idle() {  # NODE...: until sinfo says each is idle (60 s)
  local node
  for _ in $(seq 120); do
    local all=1
    for node in "$@"; do
      [ "$(sinfo -h -N -n "$node" -o %t 2>/dev/null | head -n 1)" = idle ] || all=0
    done
    [ $all = 1 ] && return 0
    sleep 0.5
  done
  sinfo -N >&2 || true
  fail "Slurm nodes $* did not become idle"
}
wait_idle "$HOST"
log "Slurm up: controller $HOST($CTL_ADDR):$PORT, node $HOST"

# Checks a training output: rank 0's header with the workers and hosts, an epoch line with
# a finite loss.
check_trained() {  # FILE WORKERS HOSTS WHAT
  grep -q "fashion_mnist: $2 worker(s) on $3 host(s)" "$1" ||
    fail "$4: no 'fashion_mnist: $2 worker(s) on $3 host(s)' in its output"
  local line
  line=$(grep -E '^epoch 1: loss [0-9.]+ +train accuracy 0\.[0-9]+' "$1") ||
    fail "$4: no 'epoch 1: loss ... train accuracy ...' line in its output"
  log "$4: $(grep -o "fashion_mnist: $2 worker(s) on $3 host(s)" "$1" | head -n 1); $line"
}

# ---- 1a. srun -n 2 ------------------------------------------------------------------------
timeout 120 srun -p local -n 2 --kill-on-bad-exit=1 "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/srun.out" 2>&1 || fail "srun -n 2 fashion_mnist exited $?"
check_trained "$WORK/srun.out" 2 1 "srun -n 2"

# ---- 1b. sbatch of the template ----------------------------------------------------------
mkdir -p "$WORK/home"
HOME="$WORK/home" timeout 150 sbatch --wait -p local -n 2 -o "$WORK/sbatch.out" "$TEMPLATE" \
  "$FASHION_MNIST" "${TRAIN_ARGS[@]}" >"$WORK/sbatch.submit" 2>&1 ||
  fail "sbatch --wait of $TEMPLATE exited $?: $(cat "$WORK/sbatch.submit")"
[ -s "$WORK/sbatch.out" ] || fail "sbatch wrote no output file"
check_trained "$WORK/sbatch.out" 2 1 "sbatch $(basename "$TEMPLATE")"
[ -z "$(ls -A "$WORK/home/.chorus")" ] || fail "the template left its secret file behind"

# ---- 1c. chorusrun inside an allocation ---------------------------------------------------
set +e
timeout 60 salloc -p local -n 2 "$CHORUSRUN" -np 4 "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/salloc4.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "chorusrun -np 4 in a 2-task allocation exited $rc, not 2"
grep -q "4 ranks do not fit in the 2 task slot(s) of Slurm allocation" "$WORK/salloc4.out" ||
  fail "chorusrun -np 4 in a 2-task allocation did not say why"
log "salloc -n 2 chorusrun -np 4: exit 2, $(grep -o 'chorusrun: 4 ranks do not fit[^(]*' "$WORK/salloc4.out")"
timeout 120 salloc -p local -n 2 "$CHORUSRUN" -np 2 "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/salloc2.out" 2>&1 || fail "salloc -n 2 chorusrun -np 2 exited $?"
sed -i 's/^\[0\] //' "$WORK/salloc2.out"
check_trained "$WORK/salloc2.out" 2 1 "salloc -n 2 chorusrun -np 2"

if [ $TWO_NODES = 0 ]; then
  log "SKIPPED part 2 (two nodes in network namespaces): $NETNS_WHY"
  exit $SKIP
fi

# ---- 2. two nodes in namespaces: srun -N 2 -n 4 -------------------------------------------
wait_idle node1 node2
veth_bytes() {  # both directions of node1's link
  local stats="/sys/class/net/csl${TAG}o1/statistics"
  echo $(($(cat "$stats/tx_bytes") + $(cat "$stats/rx_bytes")))
}
before=$(veth_bytes)
set +e
timeout 60 srun -p pair -N 2 -n 4 --kill-on-bad-exit=1 "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/nosecret.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "srun -N 2 -n 4 without a secret succeeded"
grep -q "a Slurm step across 2 nodes needs the job secret: export CHORUS_SECRET_FILE" \
  "$WORK/nosecret.out" || fail "srun -N 2 -n 4 without a secret did not say what to set"
log "srun -N 2 -n 4 without a secret: exit $rc, 'a Slurm step across 2 nodes needs the job secret'"

CHORUS_SECRET=$(od -An -vtx1 -N32 /dev/urandom | tr -d ' \n') timeout 150 \
  srun -p pair -N 2 -n 4 --kill-on-bad-exit=1 "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/srun2.out" 2>&1 || fail "srun -N 2 -n 4 fashion_mnist exited $?"
check_trained "$WORK/srun2.out" 4 2 "srun -N 2 -n 4 (node1, node2 in namespaces)"
moved=$(($(veth_bytes) - before))
[ "$moved" -gt 10000000 ] || fail "only $moved bytes crossed node1's link: not trained over TCP"
log "node1's link carried $((moved / 1000000)) MB during the step"

# The template across both nodes: its secret file, in the "home" both nodes see, reaches the
# tasks through srun's environment.
HOME="$WORK/home" timeout 150 sbatch --wait -p pair -N 2 --ntasks-per-node=2 \
  -o "$WORK/sbatch2.out" "$TEMPLATE" "$FASHION_MNIST" "${TRAIN_ARGS[@]}" \
  >"$WORK/sbatch2.submit" 2>&1 ||
  fail "sbatch --wait -N 2 of $TEMPLATE exited $?: $(cat "$WORK/sbatch2.submit")"
check_trained "$WORK/sbatch2.out" 4 2 "sbatch -N 2 $(basename "$TEMPLATE")"
[ -z "$(ls -A "$WORK/home/.chorus")" ] || fail "the template left its secret file behind"
log "PASSED"
