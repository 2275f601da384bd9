"""sitecustomize for the jobs ncclshim-run starts: installs ncclshim.hook in
every Python process that has this directory on its PYTHONPATH
(`python -m ncclshim --hook-path` prints it), then runs the sitecustomize this
one hides, if the environment has one further down sys.path.

Must not: import torch, fail the process (a broken hook is reported on
stderr and the process goes on without it), or run the hidden module twice.
"""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install():
    root = os.path.dirname(os.path.dirname(_HERE))  # the directory holding the package ncclshim
    try:
        import ncclshim.hook as hook
    except ImportError:
        sys.path.append(root)  # at the end: shadows nothing of the job's
        import ncclshim.hook as hook
    hook.install()


def _chain():
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _install()
except Exception as e:  # noqa: BLE001  (a hook must never stop the job)
    print(f"ncclshim: the hook could not be installed ({type(e).__name__}: {e}); the job runs without it",
          file=sys.stderr)
_chain()
