"""The child process that runs ONE submission (``python -m normlab.grader.worker``).

It executes the notebook's code cells, then answers the grader's requests: call a function
with these arrays, or read a variable. It never compares or scores anything: the parent does
that with its own copy of the inputs. Everything it sends back is arrays (``.npy`` bytes) and a
small JSON header, over a pipe that the learner's ``print`` cannot reach.

It reports nothing about itself that the grader believes: which names exist and what a call
returned are checked by type in the parent, compared there, and "from scratch" is established
from the notebook's source, never from here.

Usage (by the grader only)::

    python -m normlab.grader.isolation.worker REQUEST_FD REPLY_FD LIMITS_JSON
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback
import types

from normlab.grader.isolation import clock, hidden, workspace

CELL_MARKER = "<notebook cell {index}>"
# What a worker imports before the submission's budget starts: what every lab's cells import.
PRELOAD = ("numpy", "torch")
# The fork server imports more, once for every child it forks: PyTorch's symbolic shapes (and
# SymPy), which a child's first ``backward(gradient)`` would import (0.3 s of CPU), and what the
# run's labs name in ``Lab.preload`` (lab 08: Matplotlib, 0.45 s; a server of a run without
# such a lab does not pay for it). Not ``torch._dynamo``, which a first optimizer imports (1 s
# more): it imports Triton, whose interpreter the lab's environment chooses, in the child. A
# fresh interpreter (a single notebook's) imports neither: a lab that never calls backward with
# a gradient would pay for the shapes.
SERVER_PRELOAD = (*PRELOAD, "torch.fx.experimental.symbolic_shapes")
# What a child imports after it has dropped to its user (``drop_privileges``): the modules
# ``serve`` imports, then what it preloads. The grader's start-up probe imports them as that
# user, as the child does (``sandbox.nobody_probe``), but for PyTorch: its import costs the
# probe seconds (7.1 s against 0.5 s, on 2 busy cores), and the probe lists every folder of
# ``sys.path`` instead, which is where a standard library or site-packages that the user
# cannot read shows.
CHILD_IMPORTS = (
    "normlab.grader.isolation.worker",
    "normlab.grader.isolation.wire",
    "normlab.grader.isolation.limits",
    *PRELOAD,
)
PROBE_IMPORTS = tuple(name for name in CHILD_IMPORTS if name != "torch")
# What a request from the grader may hold. Not ``Limits`` of the submission: the grader is
# trusted, and these only keep a broken pipe from asking for unbounded memory. A request's
# header carries the notebook's cells (at most ``Limits.max_notebook_bytes``, 16 MB).
REQUEST_HEADER_BYTES = 1 << 30
REQUEST_ARRAY_BYTES = 1 << 34
REQUEST_ARRAYS = 1 << 10


def processes_of_this_user(uid: int | None = None) -> int:
    """Tasks (processes and their threads: what ``RLIMIT_NPROC`` counts) of this user."""
    uid, count = os.getuid() if uid is None else uid, 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def apply_limits(limits: dict, already: int | None = None) -> None:
    """Limit this process before any learner code runs: memory, CPU time, file size, core
    dumps, and processes (on top of what this user already runs, ``already``, counted before
    this process had a /proc of its own: the limit counts them all; root too, which has no
    capability left to exceed it)."""
    if already is None:
        already = processes_of_this_user()
    processes = limits["max_processes"] + already
    limits = [
        (resource.RLIMIT_AS, limits["memory_mb"] << 20),
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_FSIZE, limits["max_file_bytes"]),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, processes),
    ]
    for which, value in limits:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))
    # Writing past RLIMIT_FSIZE raises OSError in the writer instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class CellTimeout(BaseException):
    """Raised inside learner code when its time is up (BaseException: harder to swallow).
    ``busy``: it reached the wall-time backstop before its own time reached its budget (the
    machine was too busy: not the learner's doing)."""

    def __init__(self, busy: bool = False):
        super().__init__()
        self.busy = busy


#: the error type of a cell or call stopped because the machine was too busy
BUSY = "Busy"
#: the wall-time backstop of a cell or a call, as a multiple of its budget (from the limits)
_backstop = [10.0]
#: the span of the cell or call now running, if any (``clock.Span``)
_span: list = [None]


def _on_alarm(signum, frame):
    span = _span[0]
    if span is None:
        raise CellTimeout()
    wait = span.look()
    if wait is not None:  # kept waiting for a CPU: its own time is not up yet
        signal.setitimer(signal.ITIMER_REAL, wait)
        return
    raise CellTimeout(busy=span.ended == clock.BUSY)


def strip_magics(source: str) -> str:
    """Turn IPython-only lines (``%matplotlib``, ``!pip``, ``%%time``) into ``pass`` statements."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            lines.append(f"{indent}pass  # {stripped[:60]}")
        else:
            lines.append(line)
    return "\n".join(lines)


def short_traceback(error: BaseException, limit: int = 6) -> str:
    """The learner's part of a traceback: frames from notebook cells only, last ``limit`` lines."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename.startswith("<notebook cell")
    ]
    text = "".join(traceback.format_list(frames[-3:]))
    text += "".join(traceback.format_exception_only(type(error), error))
    return "\n".join(text.strip().splitlines()[-limit:])


def describe_error(error: BaseException) -> dict:
    if isinstance(error, CellTimeout) and error.busy:
        message = "stopped: the machine was too busy to run it in time"
        return {"error_type": BUSY, "message": message, "traceback": ""}
    if isinstance(error, CellTimeout):
        return {"error_type": "Timeout", "message": "ran out of time", "traceback": ""}
    if isinstance(error, FunctionNotRunAgain):
        return {"error_type": NOT_RUN_AGAIN, "message": str(error), "traceback": ""}
    message = str(error)
    if len(message) > 500:
        message = message[:500] + " ..."
    return {
        "error_type": type(error).__name__,
        "message": message,
        "traceback": short_traceback(error),
    }


def run_with_timeout(seconds: float, function, *args, **kwargs):
    """``function(*args, **kwargs)``, stopped (``CellTimeout``) once this process has used
    ``seconds`` of its own time, CPU or own wall time (``clock``), or once the wall-time
    backstop has passed (then ``busy``)."""
    span = clock.Span(seconds, seconds * _backstop[0], cpu=time.process_time, waits=clock.own_waits)
    _span[0] = span
    signal.setitimer(signal.ITIMER_REAL, span.next_check())
    try:
        return function(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _span[0] = None


#: the error type of a call to a function that ran out of time in an earlier cell (not run again)
NOT_RUN_AGAIN = "NotRunAgain"


class FunctionNotRunAgain(Exception):
    """Raised by a notebook function that ran out of time in an earlier cell, in its place."""


def _stand_in(name: str, cell: int):
    def not_run_again(*args, **kwargs):
        raise FunctionNotRunAgain(f"`{name}` ran out of time in code cell {cell + 1}")

    return not_run_again


def _notebook_functions(namespace: dict) -> dict:
    """Code object -> the names of the notebook's own functions (defined in its cells)."""
    found: dict = {}
    for name, value in list(namespace.items()):
        code = getattr(value, "__code__", None) if isinstance(value, types.FunctionType) else None
        if isinstance(name, str) and code is not None and code.co_filename.startswith("<notebook"):
            found.setdefault(code, []).append(name)
    return found


def hung_functions(error: BaseException, namespace: dict) -> list[str]:
    """The notebook function that was running when a cell ran out of time: the innermost frame
    of the traceback that is one of the notebook's own functions (every name it has), or none
    (a loop at the cell's top level)."""
    functions = _notebook_functions(namespace)
    hung: list[str] = []
    frames = error.__traceback__
    while frames is not None:
        hung = functions.get(frames.tb_frame.f_code, hung)
        frames = frames.tb_next
    return list(hung)


def execute_cells(
    cells: list[str], namespace: dict, cell_timeout: float, hung: dict | None = None
) -> list[dict]:
    """Run each code cell in order; a failing cell is recorded and the next one still runs.

    A function of the notebook that runs out of time in a cell is ``hung`` (name -> cell) and
    replaced by a stand-in that raises at once, so that the cells after it that call it cost no
    more time: a hang costs one cell's time, however many cells call the function. Functions
    already ``hung`` in an earlier run of these cells (a restart) are replaced as soon as a cell
    defines them.
    """
    hung = {} if hung is None else hung
    errors = []
    for index, source in enumerate(cells):
        for name, cell in hung.items():
            if isinstance(namespace.get(name), types.FunctionType):
                namespace[name] = _stand_in(name, cell)
        filename = CELL_MARKER.format(index=index)
        try:
            code = compile(strip_magics(source), filename, "exec")
        except SyntaxError as error:
            errors.append(
                {
                    "cell": index,
                    "error_type": "SyntaxError",
                    "message": f"{error.msg} (line {error.lineno})",
                    "traceback": "",
                }
            )
            continue
        except (MemoryError, RecursionError, ValueError) as error:  # too large or deep to compile
            errors.append({"cell": index, **describe_error(error)})
            continue
        try:
            run_with_timeout(cell_timeout, exec, code, namespace)
        except (Exception, CellTimeout, SystemExit, KeyboardInterrupt) as error:
            errors.append({"cell": index, **describe_error(error)})
            if isinstance(error, CellTimeout) and not error.busy:
                for name in hung_functions(error, namespace):
                    hung.setdefault(name, index)
                    namespace[name] = _stand_in(name, hung[name])
    return errors


def serve(request_fd: int, reply_fd: int, hide_torch: bool = False) -> None:
    from normlab.grader.isolation import wire
    from normlab.grader.isolation.limits import Limits

    # The grader is trusted: its requests carry the notebook's cells (up to the notebook limit)
    # and the checks' inputs, so they are bounded only far above anything a lab sends.
    incoming = Limits(
        max_header_bytes=REQUEST_HEADER_BYTES,
        max_reply_bytes=REQUEST_ARRAY_BYTES,
        max_arrays=REQUEST_ARRAYS,
    )

    def forget_channel():
        # A process forked by the notebook must not talk to the grader: only this one does.
        for fd in (request_fd, reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    os.register_at_fork(after_in_child=forget_channel)

    # Start-up is the grader's time, not the submission's: import what notebooks import (as the
    # fork server has already done), then say so; the submission's budget starts now.
    if hide_torch:  # a NumPy lab (under the sandbox PyTorch's folders are empty too)
        hidden.install()
    for library in PRELOAD:
        if hide_torch and library == "torch":
            continue
        try:
            __import__(library)
        except Exception:  # a missing optional library only costs its import later
            pass
    wire.send(reply_fd, {"ready": True})
    read = wire.blocking_reader(request_fd)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        try:
            header, arrays = wire.recv(read, incoming)
        except EOFError:
            return
        op = header.get("op")
        if op == "load":
            cells = wire.cells_of_load_request(arrays)
            hung = dict(header.get("hung", {}))
            errors = execute_cells(cells, namespace, header["cell_timeout"], hung)
            names = sorted(k for k in namespace if isinstance(k, str) and not k.startswith("_"))
            reply = {"ok": True, "names": names, "cell_errors": errors, "hung": hung}
            wire.send(reply_fd, reply)
        elif op in ("call", "get"):
            name = header["name"]
            if name not in namespace:
                wire.send(
                    reply_fd,
                    {"ok": False, "error_type": "Missing", "message": name, "traceback": ""},
                )
                continue
            read_back: list = []
            try:
                if op == "get":
                    result = namespace[name]
                else:
                    args = wire.decode_args(header.get("args", []), arrays, read_back)
                    values = wire.decode_args(header.get("kwargs", []), arrays, read_back)
                    kwargs = dict(zip(header.get("kwarg_names", []), values, strict=True))
                    result = run_with_timeout(header["timeout"], namespace[name], *args, **kwargs)
                reply, out = wire.encode_result(result, read_back)
            except (Exception, CellTimeout, SystemExit, KeyboardInterrupt) as error:
                reply, out = {"ok": False, **describe_error(error)}, []
            wire.send(reply_fd, reply, out)
        else:
            wire.send(
                reply_fd,
                {"ok": False, "error_type": "Protocol", "message": str(op), "traceback": ""},
            )


def _end_like(status: int) -> None:
    """Exit as a process whose wait status was ``status`` did (re-raising its signal)."""
    if os.WIFSIGNALED(status):
        signal_number = os.WTERMSIG(status)
        try:  # SIGKILL and SIGSTOP have no handler to reset (and need none)
            signal.signal(signal_number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signal_number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def _become_init(status_write: int) -> None:
    """PID 1 of the submission's PID namespace: mount its /proc, fork the learner's process
    (which returns from here), reap every orphan of the namespace, and when the learner's
    process ends tell the nanny its status and exit: the kernel then kills every process left
    in the namespace. Signals from inside the namespace cannot reach PID 1, and the learner's
    process is never PID 1 (whose signals without a handler, such as ``SIGXCPU``, the kernel
    would ignore)."""
    try:
        workspace.mount_proc()
    except OSError as error:
        print(f"normlab: no /proc of its own: {error}", file=sys.stderr, flush=True)
        os._exit(workspace.EXIT_NO_WORKSPACE)
    learner = os.fork()
    if learner == 0:
        os.close(status_write)
        return
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        if pid == learner:
            os.write(status_write, status.to_bytes(4, "little", signed=True))
            os._exit(0)


def run_under_nanny(pid_namespace: bool = False) -> None:
    """Fork: the learner's code runs in the grandchild; this process only waits and reports.

    The grader is then not the learner code's parent, so ``os.kill(os.getppid(), 9)`` kills this
    nanny, never the grader. The nanny exits with the grandchild's status (re-raising its
    signal), so the grader still learns how the submission ended.

    ``pid_namespace`` (this process has entered new PID and IPC namespaces): its child is the
    namespace's init (``_become_init``) and the learner's code runs in the init's child; the
    init reports that child's status through a pipe, and the nanny ends like it.
    """
    if os.environ.pop("NORMLAB_NO_NANNY", ""):
        return  # under bubblewrap our parent is the sandbox's init, which ignores such signals
    if pid_namespace:
        status_read, status_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        if pid_namespace:
            os.close(status_read)
            _become_init(status_write)
        return
    status = _wait_for(pid)
    if pid_namespace:
        os.close(status_write)
        reported = os.read(status_read, 4)
        if len(reported) == 4:  # else the init itself died (killed): end as it did
            status = int.from_bytes(reported, "little", signed=True)
    _end_like(status)


def drop_privileges() -> None:
    """When the grader runs as root, run the learner's code as an unprivileged user.

    ``NORMLAB_RUN_AS=uid:gid`` names the user; the grader has made the working directory theirs.
    Without write access to the repository or the gradebook, and unable to signal root's
    processes, a hostile notebook can only spoil its own working directory.
    """
    run_as = os.environ.pop("NORMLAB_RUN_AS", "")
    if not run_as or os.getuid() != 0:
        return
    uid, gid = (int(part) for part in run_as.split(":"))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        os._exit(72)  # never run learner code as root by accident


def main(argv: list[str]) -> None:
    run_submission(int(argv[1]), int(argv[2]), json.loads(argv[3]))


def enter_private_folder(folder: dict) -> None:
    """Outside the sandbox: the working folder becomes a private tmpfs with a total, and every
    other mount read-only (``workspace``), before any learner code runs; or the process ends."""
    run_as = os.environ.get("NORMLAB_RUN_AS", "")
    if run_as and os.getuid() == 0:
        owner = tuple(int(part) for part in run_as.split(":"))
    else:
        owner = os.getuid(), os.getgid()
    try:
        workspace.make_private(
            folder["path"], folder["bytes"], folder["files"], owner, folder["namespace"]
        )
        workspace.hide_folders(folder.get("hide", ()), folder.get("hide_init", ""))
    except OSError as error:
        print(f"normlab: no private folder: {error}", file=sys.stderr, flush=True)
        os._exit(workspace.EXIT_NO_WORKSPACE)


def run_submission(request_fd: int, reply_fd: int, limits: dict) -> None:
    """Become the submission's process: its own folder, nanny, unprivileged user without
    capabilities, limits, then serve. Never returns."""
    run_as = os.environ.get("NORMLAB_RUN_AS", "")
    user = int(run_as.split(":")[0]) if run_as and os.getuid() == 0 else os.getuid()
    already = processes_of_this_user(user)  # while /proc still shows every process
    if limits.get("private_folder"):
        enter_private_folder(limits["private_folder"])
    pid_namespace = bool(limits.get("pid_namespace"))
    if pid_namespace:
        try:
            workspace.enter_pid_and_ipc_namespaces(bool(limits.get("net_namespace")))
        except OSError as error:
            print(f"normlab: no PID namespace: {error}", file=sys.stderr, flush=True)
            os._exit(workspace.EXIT_NO_WORKSPACE)
    run_under_nanny(pid_namespace)
    drop_privileges()
    try:
        workspace.drop_capabilities()
    except OSError as error:
        print(f"normlab: capabilities not dropped: {error}", file=sys.stderr, flush=True)
        os._exit(workspace.EXIT_NO_WORKSPACE)
    apply_limits(limits, already)
    _backstop[0] = float(limits.get("wall_backstop", _backstop[0]))
    signal.signal(signal.SIGALRM, _on_alarm)
    os.environ["NORMLAB_GRADING"] = "1"
    # The learner's notebook sees an ordinary interpreter: no grader modules on sys.path beyond
    # the installed package, and argv without our descriptors.
    sys.argv = ["notebook"]
    try:
        serve(request_fd, reply_fd, bool(limits.get("hide_torch")))
    except BaseException:
        traceback.print_exc()  # lands in the submission's log, shown with the grader's error
        sys.stderr.flush()
        os._exit(70)
    finally:
        # Skip interpreter teardown: learner objects' __del__ or atexit hooks may hang or print.
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
