"""env/ncclshim_build.py — the PEP 517 build backend of the ncclshim package.

pip (or `python -m build`) calls build_wheel / build_sdist here. A wheel is
built by the project's own Makefile, into the same build directory as a plain
`make` (B, default build/: a checkout that was built already only relinks
what changed), then zipped with the Python package (env/ncclshim/) and the
tools, as:

  ncclshim/                   the package: __init__ (stats), __main__ (--lib,
                              --check, --hook-path), cli (console scripts),
                              hook (the in-worker hook), emulate, ncclpg (the
                              CPU process group of --emulate)
  ncclshim/site/              sitecustomize.py: the hook, for PYTHONPATH
  ncclshim/lib/libncclshim.so the shim; kernels.mode says how its kernels
                              were built (nvcc's fatbin, or "none": NVRTC)
  ncclshim/lib/hostnccl/      the host NCCL (only where Open MPI's mpicc is:
                              it is built over libmpi), for --emulate
  ncclshim/bin/               ncclshim-envcheck (the shim's parser, for the
                              launcher and --check), ncclshim_model (the cost
                              model), allreduce_perf (the benchmark
                              ncclshim-tune runs; with mpicc)
  ncclshim/scripts/           env/ncclshim-run, env/ncclshim-tune, the
                              presets env/*.env, bench/ncclshim-report,
                              bench/ncclshim-model and its committed rates

Standard library only, so `pip install --no-build-isolation .` needs no
network. Metadata (name, version, scripts) comes from pyproject.toml.

Must not: build anything the Makefile does not, write outside the build
directory and the wheel directory, or run `make deps` (apt-get).
"""
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    """name, version, summary, requires-python and console scripts of pyproject.toml."""
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib
        doc = tomllib.loads(text)
        p = doc["project"]
        return p["name"], p["version"], p.get("description", ""), p.get("requires-python", ""), p.get("scripts", {})
    except ImportError:  # Python < 3.11: the few plain `key = "value"` lines this file has
        table, vals, scripts = None, {}, {}
        for line in text.splitlines():
            m = re.match(r"\s*\[([^\]]+)\]\s*$", line)
            if m:
                table = m.group(1)
                continue
            m = re.match(r'\s*"?([\w.-]+)"?\s*=\s*"(.*)"\s*$', line)
            if m and table == "project":
                vals[m.group(1)] = m.group(2)
            elif m and table == "project.scripts":
                scripts[m.group(1)] = m.group(2)
        return vals["name"], vals["version"], vals.get("description", ""), vals.get("requires-python", ""), scripts


def _make(build):
    """The libraries and tools the wheel holds; returns {wheel path: file}."""
    have_mpicc = shutil.which(os.environ.get("MPICC", "mpicc")) is not None
    targets = [f"{build}/lib/libncclshim.so", f"{build}/bin/ncclshim-envcheck", f"{build}/bin/ncclshim_model"]
    if have_mpicc:
        targets += [f"{build}/lib/hostnccl/libnccl.so.2", f"{build}/bin/allreduce_perf"]
    cmd = ["make", "-C", ROOT, f"B={build}", f"-j{os.cpu_count() or 1}"] + targets
    print("ncclshim build: " + " ".join(cmd), file=sys.stderr)
    # The Makefile asks `python3` where PyTorch's CUDA and NCCL wheels are
    # (no toolkit): the Python that runs this build, so the venv's wheels.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(cmd, check=True, stdout=sys.stderr, env=env)
    files = {"ncclshim/lib/libncclshim.so": targets[0],
             "ncclshim/lib/kernels.mode": f"{build}/obj/compress/kernels.mode",
             "ncclshim/bin/ncclshim-envcheck": targets[1],
             "ncclshim/bin/ncclshim_model": targets[2]}
    if have_mpicc:
        files["ncclshim/lib/hostnccl/libnccl.so.2"] = targets[3]
        files["ncclshim/bin/allreduce_perf"] = targets[4]
    else:
        print("ncclshim build: no mpicc: the wheel has no host NCCL (ncclshim-run --emulate) and no allreduce_perf "
              "(ncclshim-tune's runs)", file=sys.stderr)
    return {k: os.path.join(ROOT, v) for k, v in files.items()}


def _sources():
    """{wheel path: file} of the Python package and the tools."""
    files = {}
    pkg = os.path.join(ROOT, "env", "ncclshim")
    for sub in ("", "site"):
        for f in sorted(os.listdir(os.path.join(pkg, sub))):
            if f.endswith(".py"):
                files["/".join(p for p in ("ncclshim", sub, f) if p)] = os.path.join(pkg, sub, f)
    for f in ("ncclshim-run", "ncclshim-tune"):
        files["ncclshim/scripts/" + f] = os.path.join(ROOT, "env", f)
    for f in sorted(os.listdir(os.path.join(ROOT, "env"))):
        if f.endswith(".env"):
            files["ncclshim/scripts/" + f] = os.path.join(ROOT, "env", f)
    files["ncclshim/scripts/ncclshim-report"] = os.path.join(ROOT, "bench", "ncclshim-report")
    files["ncclshim/scripts/ncclshim-model"] = os.path.join(ROOT, "bench", "ncclshim-model")
    files["ncclshim/scripts/rates-default.txt"] = os.path.join(ROOT, "bench", "model", "rates-default.txt")
    return files


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-" + plat


def _metadata(name, version, summary, requires, readme=True):
    lines = ["Metadata-Version: 2.2", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    if requires:
        lines.append(f"Requires-Python: {requires}")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return "\n".join(lines) + "\n" + body


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, build):
    name, version, summary, requires, scripts = _project()
    dist = f"{name}-{version}"
    whl = os.path.join(wheel_directory, f"{dist}-{_tag()}.whl")
    part = whl + ".part"  # renamed once whole: a failed build leaves no wheel
    files = dict(_sources())
    files.update(_make(build))
    info = f"{dist}.dist-info"
    meta = {
        f"{info}/METADATA": _metadata(name, version, summary, requires),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: ncclshim_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n",
        f"{info}/entry_points.txt": "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items()),
    }
    record = []
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, src in sorted(files.items()):
            with open(src, "rb") as f:
                data = f.read()
            zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            executable = os.access(src, os.X_OK) and not arc.endswith((".py", ".env", ".mode", ".txt"))
            zi.external_attr = (0o100755 if executable else 0o100644) << 16  # a regular file (pip checks S_ISREG)
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
            record.append(_record_line(arc, data))
        for arc, text in meta.items():
            data = text.encode()
            z.writestr(zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0)), data)
            record.append(_record_line(arc, data))
        record.append(f"{info}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    os.replace(part, whl)
    return os.path.basename(whl)


# ---- PEP 517 -------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build = (config_settings or {}).get("B") or os.environ.get("B") or "build"
    return _write_wheel(wheel_directory, build)


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files of the checkout (git ls-files), or the tree less build
    directories where git is not there."""
    name, version, *_ = _project()
    base = f"{name}-{version}"
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
        paths = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for d, subdirs, fs in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            subdirs[:] = [s for s in subdirs if not s.startswith(("build", ".")) and s != "__pycache__"]
            paths += [os.path.normpath(os.path.join(rel, f)) for f in fs]
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for p in sorted(paths):
            if os.path.isfile(os.path.join(ROOT, p)):
                t.add(os.path.join(ROOT, p), arcname=f"{base}/{p}", recursive=False)
        pkg = _metadata(name, version, *_project()[2:4]).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg))
    return os.path.basename(out)
