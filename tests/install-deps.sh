#!/usr/bin/env bash
# install-deps.sh — install the Debian packages the build and tests need, and
# only those that are missing (apt-get is not called when nothing is); then
# PyTorch (the PyPI wheel, used on CPU by tests/torch and the demo) into a
# cached virtual environment shared by every clone, created only when it has
# no importable torch: ${XDG_CACHE_HOME:-~/.cache}/ncclshim/torch-venv, or
# NCCLSHIM_TORCH_VENV (tests/lib.sh uses the same path).
set -eu
TORCH_VENV=${NCCLSHIM_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclshim/torch-venv}
TORCH_SPEC=${NCCLSHIM_TORCH_SPEC:-torch==2.15.0}
torch_deps() {
  if [ -x "$TORCH_VENV/bin/python" ] && v=$("$TORCH_VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    echo "ncclshim: torch $v in $TORCH_VENV (cached, not reinstalled)"
    return 0
  fi
  echo "ncclshim: installing $TORCH_SPEC into $TORCH_VENV (one-time download of a few GB)"
  mkdir -p "$(dirname "$TORCH_VENV")"
  python3 -m venv "$TORCH_VENV"
  "$TORCH_VENV/bin/python" -m pip install -q --upgrade pip
  "$TORCH_VENV/bin/python" -m pip install -q "$TORCH_SPEC" numpy
  echo "ncclshim: torch $("$TORCH_VENV/bin/python" -c 'import torch; print(torch.__version__)') in $TORCH_VENV"
}
pkgs="build-essential libcmocka-dev libopenmpi-dev openmpi-bin gnuplot-nox valgrind python3 python3-venv clang libclang-rt-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "ncclshim: installing missing packages:$missing"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
torch_deps
