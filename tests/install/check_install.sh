#!/usr/bin/env bash
# chorus as a user outside the tree gets it (tests/install/CMakeLists.txt runs each mode):
#   cmake   cmake --install into a scratch prefix; the public headers include only chorus/
#           headers and nothing names the build or source tree; the consumer project
#           (consumer/) builds with find_package(chorus) and runs on 2 ranks under the
#           installed chorusrun; chorusrun --version; the installed chorus.torch imports and
#           allreduces on 2 ranks (when the Python package was built)
#   pkgconfig   the same consumer built with `pkg-config --cflags --libs chorus` only
#   deb     the Debian packages from CPack: names, versions, Depends (dpkg-deb -f), contents
#           (dpkg-deb -c); unpacked (dpkg-deb -x) into a scratch root, where the consumer
#           builds through CMake and through pkg-config and runs under the unpacked chorusrun
#
#   check_install.sh MODE --build DIR --source DIR --work DIR --version X.Y.Z
#                    [--cpack PATH] [--torch ON|OFF] [--python ON|OFF]
set -euo pipefail
mode=$1
shift
torch=OFF python=OFF cpack=cpack
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2 ;;
    --source) source=$2 ;;
    --work) work=$2 ;;
    --version) version=$2 ;;
    --cpack) cpack=$2 ;;
    --torch) torch=$2 ;;
    --python) python=$2 ;;
    *) echo "check_install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
consumer_src="$source/tests/install/consumer"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

# Runs the consumer on 2 ranks with the given chorusrun and checks rank 0's line.
run_consumer() {  # chorusrun consumer
  local out
  out=$("$1" -np 2 "$2" 2>&1) || fail "consumer under $1: $out"
  grep -qx "\[0\] consumer ok: chorus $version, 2 ranks, sum 3" <<<"$out" \
    || fail "consumer said: $out"
  echo "$out"
}

# Configures and builds the consumer with CMake against prefix $1 into $2.
build_with_cmake() {
  local log
  log=$(cmake -S "$consumer_src" -B "$2" -DCMAKE_PREFIX_PATH="$1" -DEXPECT_TORCH="$torch" \
              -DCMAKE_BUILD_TYPE=Release 2>&1) || fail "consumer configure: $log"
  grep -q "consumer: chorus $version from $1/" <<<"$log" || fail "found another chorus: $log"
  cmake --build "$2" >/dev/null || fail "consumer build"
}

# Builds the consumer with pkg-config's flags only, the .pc from directory $1, into $2.
build_with_pkgconfig() {
  local flags
  [[ $(PKG_CONFIG_PATH=$1 pkg-config --modversion chorus) == "$version" ]] || fail "pc version"
  flags=$(PKG_CONFIG_PATH=$1 pkg-config --cflags --libs chorus) || fail "pkg-config chorus"
  # shellcheck disable=SC2086  # the flags are words
  c++ -std=c++17 -O1 -o "$2" "$consumer_src/main.cc" $flags || fail "build with: $flags"
}

install_prefix() {
  cmake --install "$build" --prefix "$1" >/dev/null
}

check_tree() {  # prefix
  local bad
  bad=$(grep -rhoE '#\s*include\s*"[^"]+"' "$1/include" | grep -v '"chorus/' || true)
  [[ -z $bad ]] || fail "public headers include non-chorus headers: $bad"
  [[ -f $1/include/chorus/version.h && -f $1/lib/libchorus_comm.a ]] || fail "missing files"
  bad=$(grep -rlE "$build|$source/(src|include)" "$1/lib/cmake" "$1/lib/pkgconfig" || true)
  [[ -z $bad ]] || fail "installed package files name the build or source tree: $bad"
  [[ $("$1/bin/chorusrun" --version) == "chorusrun (chorus) $version" ]] || fail "--version"
}

check_python() {  # prefix
  local pydir=$1/lib/python3/dist-packages out
  [[ $python == ON ]] || return 0
  [[ -d $pydir/chorus/torch ]] || fail "no Python package in $pydir"
  ! readelf -d "$pydir"/chorus/torch/_ops*.so | grep -q "$build" || fail "_ops keeps a build RPATH"
  out=$(PYTHONPATH=$pydir PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 "$1/bin/chorusrun" -np 2 \
        /usr/bin/python3 -c '
import torch, chorus.torch as hvd
assert hvd.__file__.startswith("'"$pydir"'"), hvd.__file__
hvd.init()
t = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum)
print("python ok", hvd.rank(), t.item())' 2>&1) || fail "installed chorus.torch: $out"
  grep -qx '\[1\] python ok 1 3.0' <<<"$out" || fail "installed chorus.torch said: $out"
  echo "$out"
}

deb_field() { dpkg-deb -f "$1" "$2"; }

# Whether the listing of package $1 (dpkg-deb -c) has a line matching the regex $2. The
# listing is read whole first: grep -q stopping early would kill dpkg-deb with SIGPIPE.
has_file() {
  local listing
  listing=$(dpkg-deb -c "$1") || fail "dpkg-deb -c $1"
  grep -qE " \./usr/$2\$" <<<"$listing"
}

check_debs() {  # dir with the .deb files
  local deb
  for pkg in chorus chorus-dev $([[ $python == ON ]] && echo python3-chorus); do
    deb=$(ls "$1/${pkg}_${version}-1_"*.deb) || fail "no package $pkg"
    [[ $(deb_field "$deb" Package) == "$pkg" && $(deb_field "$deb" Version) == "$version-1" ]] \
      || fail "$deb: $(dpkg-deb -f "$deb" Package Version)"
    echo "$pkg Depends: $(deb_field "$deb" Depends)"
  done
  deb=$(ls "$1"/chorus_*.deb)
  deb_field "$deb" Depends | grep -q 'libssl3' || fail "chorus does not depend on libssl3"
  has_file "$deb" bin/chorusrun || fail "chorusrun not in $deb"
  has_file "$deb" share/doc/chorus/docs/launcher.md || fail "docs not in $deb"
  deb=$(ls "$1"/chorus-dev_*.deb)
  deb_field "$deb" Depends | grep -q 'libssl-dev' || fail "chorus-dev does not depend on libssl-dev"
  for f in include/chorus/job.h include/chorus/version.h lib/libchorus_comm.a \
           lib/cmake/chorus/chorusConfig.cmake lib/pkgconfig/chorus.pc; do
    has_file "$deb" "$f" || fail "$f not in $deb"
  done
  if [[ $python == ON ]]; then
    deb=$(ls "$1"/python3-chorus_*.deb)
    deb_field "$deb" Depends | grep -q 'python3-torch' || fail "python3-chorus: no python3-torch"
    deb_field "$deb" Depends | grep -q 'libtorch' || fail "python3-chorus: no libtorch"
    has_file "$deb" 'lib/python3/dist-packages/chorus/torch/_ops[^/]*\.so' \
      || fail "extension not in $deb"
  fi
}

case "$mode" in
  cmake)
    step "install into a scratch prefix"
    install_prefix "$work/prefix"
    check_tree "$work/prefix"
    step "consumer through find_package(chorus)"
    build_with_cmake "$work/prefix" "$work/consumer"
    run_consumer "$work/prefix/bin/chorusrun" "$work/consumer/consumer"
    step "installed Python package"
    check_python "$work/prefix"
    ;;
  pkgconfig)
    install_prefix "$work/prefix"
    step "consumer through pkg-config"
    build_with_pkgconfig "$work/prefix/lib/pkgconfig" "$work/consumer"
    run_consumer "$work/prefix/bin/chorusrun" "$work/consumer"
    ;;
  deb)
    step "Debian packages (CPack)"
    # gzip here: the same contents as scripts/package's xz, in a fraction of the time.
    (cd "$work" && "$cpack" --config "$build/CPackConfig.cmake" -B "$work/debs" \
                           -D CPACK_DEBIAN_COMPRESSION_TYPE=gzip >/dev/null) || fail "cpack"
    check_debs "$work/debs"
    step "unpacked into a scratch root"
    for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
    build_with_cmake "$work/root/usr" "$work/consumer-cmake"
    run_consumer "$work/root/usr/bin/chorusrun" "$work/consumer-cmake/consumer"
    build_with_pkgconfig "$work/root/usr/lib/pkgconfig" "$work/consumer-pc"
    run_consumer "$work/root/usr/bin/chorusrun" "$work/consumer-pc"
    ;;
  *) echo "check_install.sh: unknown mode $mode" >&2; exit 2 ;;
esac
echo "check_install.sh $mode: ok"
