"""python -m ncclshim --lib | --check | --version

  --lib      the installed libncclshim.so's path, for
             LD_PRELOAD=$(python -m ncclshim --lib) torchrun ... train.py
  --check    whether this Python's PyTorch links NCCL dynamically (only then
             can LD_PRELOAD interpose it: libtorch_cuda.so's dynamic symbol
             table must import ncclAllReduce, the fact `nm -D` shows), and which
             CUDA kernels a device would get (the fatbin built in, or NVRTC at
             run time, and whether libnvrtc is found). Exit 0 when the shim can
             work here, 1 when it cannot (statically linked NCCL, no library).
  --version  the package's version

Reads files only: never imports torch nor loads the shim.
"""
import ctypes
import glob
import importlib.util
import os
import re
import struct
import sys

from . import __version__, lib_path


def _dynamic_symbols(path):
    """{name: defined?} of an ELF64 little-endian file's .dynsym, and its
    DT_NEEDED entries. Raises ValueError for anything else."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    syms, needed = {}, []
    for name, typ, flags, addr, off, size, link, info, align, entsize in secs:
        strtab = secs[link]
        stroff = strtab[4]

        def cstr(o):
            end = data.index(b"\0", stroff + o)
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


def _nvrtc():
    """Where a libnvrtc.so.13 would come from, or None."""
    try:
        ctypes.CDLL("libnvrtc.so.13")
        return "libnvrtc.so.13 (the loader's search path)"
    except OSError:
        pass
    for base in sys.path:
        hits = sorted(glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libnvrtc.so.13*")))
        if hits:
            return hits[0]
    return None


def _kernels():
    mode_file = os.path.join(os.path.dirname(lib_path()), "kernels.mode")
    try:
        mode = open(mode_file).read().strip()
    except OSError:
        mode = "unknown"
    nvrtc = _nvrtc()
    rtc = f"NVRTC from {nvrtc}" if nvrtc else "NVRTC, but no libnvrtc.so.13 was found (pip's nvidia-cuda-nvrtc / PyTorch's CUDA wheels bring it)"
    if mode == "none":
        return f"no fatbin was built (no nvcc at build time): a device's kernels are compiled at its first use by {rtc}"
    if mode == "unknown":
        return f"unknown how the kernels were built ({mode_file} missing); at run time the fallback is {rtc}"
    codes = [c for m in re.findall(r"code=\[?([\w,]+)\]?", mode) for c in m.split(",")]
    sass = sorted({c for c in codes if c.startswith("sm_")}, key=lambda c: int(c[3:]))
    ptx = sorted({c for c in codes if c.startswith("compute_")}, key=lambda c: int(c[8:]))
    return (f"fatbin built in (SASS for {' '.join(sass) or 'none'}; PTX {' '.join(ptx) or 'none'} for newer devices); "
            f"where it does not load (a driver older than the toolkit that built it), {rtc}")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--lib"]:
        print(lib_path())
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
        return 0 if ok and good else 1
    print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
