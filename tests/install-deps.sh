#!/usr/bin/env bash
# install-deps.sh — install the Debian packages the build and tests need, and
# only those that are missing (apt-get is not called when nothing is).
set -eu
pkgs="build-essential libcmocka-dev libopenmpi-dev openmpi-bin gnuplot-nox valgrind python3 clang libclang-rt-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then exit 0; fi
echo "ncclshim: installing missing packages:$missing"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
