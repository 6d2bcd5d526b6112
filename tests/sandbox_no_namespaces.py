"""The sandbox server on a machine that refuses namespaces (Docker's default seccomp profile,
no user namespaces): tests start it in place of evalpipe/sandbox/worker.py to see the weak
fallback on any machine. Run as `python -I -S`, like the real server."""

import errno
import os
import sys
from importlib.util import module_from_spec, spec_from_file_location

WORKER = os.path.join(os.path.dirname(__file__), "..", "evalpipe", "sandbox", "worker.py")
spec = spec_from_file_location("worker", WORKER)
worker = sys.modules["worker"] = module_from_spec(spec)  # its dataclasses look it up
spec.loader.exec_module(worker)


def refused(*args: object) -> None:
    raise OSError(errno.EPERM, "Operation not permitted (refused as a seccomp profile does)")


worker.Isolation.isolate_server = refused
worker._enter_user_namespace = refused
worker.main()
