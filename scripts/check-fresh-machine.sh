#!/usr/bin/env bash
# Checks the README's promise on a pristine Debian 12 root: `make demo` and (a quick part of)
# `make test` with nothing installed but what scripts/install-deps.sh installs. CI runs on a
# developer machine where hand-installed packages hide a missing dependency (a green CI once
# hid a missing OpenCL package that broke every new user's build); this catches that class
# of bug. Too slow for CI (~40-60 min on 2 cores, most of it building): run it before closing
# any change to the dependencies or the build.
#
#   sudo scripts/check-fresh-machine.sh            # the working tree as it is (tracked and
#                                                  # untracked-but-not-ignored files)
#   FRESH_KEEP=1 ...                               # keep the root afterwards (printed)
#   FRESH_TESTS='-L unit' ...                      # the ctest selection run after the demo
#                                                  # (default: every label whose tests need
#                                                  # a package of their own: unit, python,
#                                                  # cli, install, costdb, and the models
#                                                  # tests' PyTorch export)
#   FRESH_MIRROR=http://deb.debian.org/debian ...  # default: the machine's own apt mirror
#
# Needs root (debootstrap, chroot, mounts), the debootstrap package, network access to the
# Debian mirror, and ~8 GB of disk under ${TMPDIR:-/var/tmp}.
set -euo pipefail

[ "$(id -u)" -eq 0 ] || { echo "check-fresh-machine: run as root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || {
  echo "check-fresh-machine: needs debootstrap (apt-get install debootstrap)" >&2
  exit 2
}
cd "$(dirname "$0")/.."
SRC=$(pwd)

# The mirror this machine's apt uses (deb822 sources first, then the classic list).
mirror=${FRESH_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' |
           grep -v security | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security |
           head -n 1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
# The default reaches every package the tests use: pybind11 + numpy + pytest (python, cli),
# CMake's find_package of an installed tree (install), the PostgreSQL server (costdb), and
# python3-torch/torchvision/onnx (models_export writes the exported models).
# The quotes stay in TESTS (the inner shell of run_in_root parses them): unquoted, its '|'
# would be pipes there.
TESTS=${FRESH_TESTS:-"-L 'unit|python|cli|install|costdb|models_export'"}

ROOT=$(mktemp -d "${TMPDIR:-/var/tmp}/collage-fresh.XXXXXX")
# mktemp makes the folder 0700; as the root's "/" that would lock every user but root out
# of the whole system (a test running a server as nobody could not load its libraries).
chmod 755 "$ROOT"
start=$(date +%s)
cleanup() {
  for m in dev/pts dev sys proc; do umount -l "$ROOT/$m" 2>/dev/null || true; done
  if [ -n "${FRESH_KEEP:-}" ]; then
    echo "check-fresh-machine: kept $ROOT"
  else
    rm -rf --one-file-system "$ROOT"
  fi
}
trap cleanup EXIT
stamp() { echo "== [$(( $(date +%s) - start )) s] $*"; }

stamp "debootstrap bookworm from $mirror into $ROOT"
debootstrap --variant=minbase bookworm "$ROOT" "$mirror" >"$ROOT.debootstrap.log" 2>&1 || {
  tail -n 30 "$ROOT.debootstrap.log"
  exit 1
}
rm -f "$ROOT.debootstrap.log"
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"

stamp "copying the checkout (git's view of the working tree) to /src"
mkdir -p "$ROOT/src"
git -C "$SRC" ls-files -z --cached --others --exclude-standard |
  (cd "$SRC" && tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$ROOT/src"

# A new user has git (to clone) and make (to type the two commands); nothing else.
stamp "installing make (the only thing the README's commands need beforehand)"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq make >/dev/null'

run_in_root() {
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 TERM=dumb bash -c "cd /src && $1"
}

# Progress lines only (the whole log stays in the root); pipefail gives the command's status.
progress() { awk '/^(==|install-deps|tuned in|verify|plan written|CMake Error)|error:|FAILED/ {print; fflush()}'; }

stamp "make demo (install-deps + build + a short tune)"
if ! run_in_root "COLLAGE_DEMO_MODEL=resnet-tiny COLLAGE_DEMO_BUDGET=5 make demo" 2>&1 |
  tee "$ROOT/demo.log" | progress; then
  echo "check-fresh-machine: make demo FAILED"
  tail -n 40 "$ROOT/demo.log"
  exit 1
fi

stamp "ctest $TESTS (a quick part of make test)"
if ! run_in_root "cd build && ctest $TESTS -j\$(nproc) --timeout 1500" >"$ROOT/test.log" 2>&1; then
  echo "check-fresh-machine: tests FAILED"
  grep -E 'Failed|\*\*\*|tests passed' "$ROOT/test.log" | head -n 30 ||
    tail -n 30 "$ROOT/test.log"
  exit 1
fi
tail -n 4 "$ROOT/test.log"

stamp "PASSED: make demo and ctest $TESTS on a pristine Debian 12 root"
