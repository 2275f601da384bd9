#!/usr/bin/env bash
# install-deps.sh — install the Debian packages the build and tests need, and
# only those that are missing (apt-get is not called when nothing is); then
# PyTorch (the PyPI wheel, used on CPU by tests/torch and the demo) into a
# cached virtual environment shared by every clone, created only when it has
# no importable torch: ${XDG_CACHE_HOME:-~/.cache}/ncclshim/torch-venv, or
# SHIMTEST_TORCH_VENV (tests/lib.sh uses the same path); then accelerate into
# it (tests/t/83-frameworks.sh), and with --frameworks also transformers,
# Lightning and DeepSpeed (`make test-frameworks`), each pinned and installed
# only when it is not importable.
#
#   tests/install-deps.sh [--frameworks]
set -eu
FRAMEWORKS=0
[ "${1:-}" = --frameworks ] && FRAMEWORKS=1
TORCH_VENV=${SHIMTEST_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclshim/torch-venv}
TORCH_SPEC=${SHIMTEST_TORCH_SPEC:-torch==2.15.0}
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
# py_deps MODULE=SPEC...: pip install each SPEC whose MODULE the venv cannot import.
py_deps() {
  local m want=()
  for m in "$@"; do
    "$TORCH_VENV/bin/python" -c "import ${m%%=*}" >/dev/null 2>&1 || want+=("${m#*=}")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  echo "ncclshim: installing ${want[*]} into $TORCH_VENV"
  "$TORCH_VENV/bin/python" -m pip install -q "${want[@]}"
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
py_deps accelerate=accelerate==1.16.0
[ "$FRAMEWORKS" = 0 ] || py_deps transformers=transformers==5.25.0 lightning=lightning==2.6.6 deepspeed=deepspeed==0.19.8
