"""python -m ncclshim --lib | --hook-path | --check | --version

  --lib        the installed libncclshim.so's path, for
               LD_PRELOAD=$(python -m ncclshim --lib) torchrun ... train.py
  --hook-path  the directory of the package's in-worker hook (ncclshim.hook:
               one line at exit when the shim saw no NCCL all-reduce), for
               PYTHONPATH=$(python -m ncclshim --hook-path) (ncclshim-run puts
               it there itself)
  --check      whether this Python's PyTorch links NCCL dynamically (only then
               can LD_PRELOAD interpose it: libtorch_cuda.so's dynamic symbol
               table must import ncclAllReduce, the fact `nm -D` shows), which
               CUDA kernels a device would get (the fatbin built in, or NVRTC at
               run time, and whether libnvrtc is found), and whether the shim
               would accept this environment's NCCLSHIM_* settings (the packaged
               ncclshim-envcheck: the shim's own parser, every problem named).
               Exit 0 when the shim can work here, 1 when it cannot (statically
               linked NCCL, no library, a setting it would refuse).
  --version    the package's version

Reads files and runs ncclshim-envcheck only: never imports torch nor loads the
shim.
"""
import ctypes
import importlib.util
import mmap
import os
import re
import struct
import subprocess
import sys

from . import __version__, lib_path


def _dynamic_symbols(path):
    """{name: defined?} of an ELF64 little-endian file's .dynsym, and its
    DT_NEEDED entries (the file mapped, not read: libtorch_cuda.so is about
    a GB). Raises ValueError for anything else, or when it has no section
    headers to read them from."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            return _parse_dynamic(data)
        except (IndexError, struct.error) as e:
            raise ValueError(f"malformed ELF file ({e})") from None


def _parse_dynamic(data):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if not shoff or not shnum:
        raise ValueError("no section headers (stripped, or more than 65535 sections)")
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    syms, needed = {}, []
    for name, typ, flags, addr, off, size, link, info, align, entsize in secs:
        if typ not in (6, 11):
            continue
        stroff = secs[link][4]

        def cstr(o):
            end = data.find(b"\0", stroff + o)
            if end < 0:
                raise ValueError("string table without its end")
            return data[stroff + o:end].decode(errors="replace")
        if typ == 11:  # SHT_DYNSYM
            for k in range(1, size // (entsize or 24)):
                st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", data, off + k * (entsize or 24))
                syms[cstr(st_name)] = st_shndx != 0
        elif typ == 6:  # SHT_DYNAMIC
            for k in range(size // (entsize or 16)):
                tag, val = struct.unpack_from("<qQ", data, off + k * (entsize or 16))
                if tag == 0:
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(cstr(val))
    if not syms:
        raise ValueError("no dynamic symbol table")
    return syms, needed


def _torch_nccl():
    """(ok, message) about this Python's PyTorch and NCCL."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False, "PyTorch is not importable from this Python (check with the Python that runs the job)"
    lib = os.path.join(os.path.dirname(spec.origin), "lib", "libtorch_cuda.so")
    if not os.path.exists(lib):
        return False, f"no {lib}: this PyTorch has no CUDA build (a CPU wheel): there is no NCCL to interpose"
    try:
        syms, needed = _dynamic_symbols(lib)
    except (OSError, ValueError, struct.error) as e:
        return False, f"cannot read {lib}: {e}"
    if "ncclAllReduce" not in syms:
        return False, f"{lib} has no ncclAllReduce in its dynamic symbols: NCCL is linked in statically, LD_PRELOAD cannot interpose it"
    if syms["ncclAllReduce"]:
        return False, f"{lib} defines ncclAllReduce itself (NCCL linked statically): LD_PRELOAD cannot interpose it"
    nccl = [n for n in needed if n.startswith("libnccl")]
    return True, (f"{lib} imports ncclAllReduce dynamically (NEEDED {', '.join(nccl) or 'libnccl through another library'}): "
                  "the preloaded shim interposes it")


# What compress/cu_nvrtc.c tries, in its order: sonames, then the CUDA
# wheels' layout under site-packages/nvidia/.
_NVRTC_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12")
_NVRTC_WHEELS = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12", "cu12/lib/libnvrtc.so.12")


def _nvrtc():
    """Where the shim would find libnvrtc, or None."""
    for so in _NVRTC_SONAMES:
        try:
            ctypes.CDLL(so)
            return f"{so} (the loader's search path)"
        except OSError:
            pass
    for base in sys.path:
        for rel in _NVRTC_WHEELS:
            if os.path.exists(os.path.join(base, "nvidia", rel)):
                return os.path.join(base, "nvidia", rel)
    return None


def _kernels():
    mode_file = os.path.join(os.path.dirname(lib_path()), "kernels.mode")
    try:
        mode = open(mode_file).read().strip()
    except OSError:
        mode = "unknown"
    nvrtc = _nvrtc()
    rtc = f"NVRTC from {nvrtc}" if nvrtc else ("NVRTC, but no libnvrtc.so.13 or .so.12 was found (PyTorch's CUDA "
                                               "wheels bring it: nvidia/cu13 or nvidia/cuda_nvrtc)")
    if mode == "none":
        return f"no fatbin was built (no nvcc at build time): a device's kernels are compiled at its first use by {rtc}"
    if mode == "unknown":
        return f"unknown how the kernels were built ({mode_file} missing); at run time the fallback is {rtc}"
    codes = [c for m in re.findall(r"code=\[?([\w,]+)\]?", mode) for c in m.split(",")]
    def arch(c):  # sm_90, sm_90a, compute_100f: by the number
        m = re.search(r"_(\d+)", c)
        return (int(m.group(1)) if m else 0, c)
    sass = sorted({c for c in codes if c.startswith("sm_")}, key=arch)
    ptx = sorted({c for c in codes if c.startswith("compute_")}, key=arch)
    return (f"fatbin built in (SASS for {' '.join(sass) or 'none'}; PTX {' '.join(ptx) or 'none'} for newer devices); "
            f"where it does not load (a driver older than the toolkit that built it), {rtc}")


def _settings():
    """(ok, lines) about this environment's NCCLSHIM_* settings, as the shim
    would judge them (ncclshim-envcheck, a program: the library is not loaded)."""
    tool = os.path.join(os.path.dirname(os.path.dirname(lib_path())), "bin", "ncclshim-envcheck")
    if not os.access(tool, os.X_OK):
        return False, [f"not checked: {tool} is missing (reinstall the package)"]
    r = subprocess.run([tool], stderr=subprocess.PIPE, text=True)
    if r.returncode == 0:
        return True, ["every NCCLSHIM_* variable set here is one the shim accepts"]
    strip = "ncclshim: "
    return False, [l[len(strip):] if l.startswith(strip) else l for l in r.stderr.splitlines() if l.strip()]


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--lib"]:
        print(lib_path())
        return 0
    if args == ["--hook-path"]:
        print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "site"))
        return 0
    if args == ["--version"]:
        print(__version__)
        return 0
    if args == ["--check"]:
        ok = True
        lib = lib_path()
        if os.path.exists(lib):
            print(f"library: {lib}")
        else:
            print(f"library: MISSING ({lib}): reinstall the package")
            ok = False
        good, msg = _torch_nccl()
        print(("torch: " if good else "torch: CANNOT INTERPOSE: ") + msg)
        print("kernels: " + _kernels())
        fine, lines = _settings()
        print(("settings: " if fine else "settings: REFUSED: ") + lines[0])
        for line in lines[1:]:
            print("settings: REFUSED: " + line)
        return 0 if ok and good and fine else 1
    print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
