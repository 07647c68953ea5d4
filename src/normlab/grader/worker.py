"""The child process that runs ONE submission (``python -m normlab.grader.worker``).

It executes the notebook's code cells, then answers the grader's requests: call a function
with these arrays, or read a variable. It never compares or scores anything: the parent does
that with its own copy of the inputs. Everything it sends back is arrays (``.npy`` bytes) and a
small JSON header, over a pipe that the learner's ``print`` cannot reach.

Usage (by the grader only)::

    python -m normlab.grader.worker REQUEST_FD REPLY_FD MEMORY_MB CPU_SECONDS
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import traceback

CELL_MARKER = "<notebook cell {index}>"
MAX_FILE_BYTES = 64 << 20  # a submission may write at most 64 MiB to any one file
MAX_PROCESSES = 512  # processes and threads of the unprivileged grading user, all workers together


def apply_limits(memory_mb: int, cpu_seconds: int) -> None:
    """Limit this process before any learner code runs: memory, CPU time, file size, core dumps."""
    limits = [
        (resource.RLIMIT_AS, memory_mb << 20),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in limits:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))
    # Writing past RLIMIT_FSIZE raises OSError in the writer instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class CellTimeout(BaseException):
    """Raised inside learner code when its time is up (BaseException: harder to swallow)."""


def _on_alarm(signum, frame):
    raise CellTimeout()


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
    if isinstance(error, CellTimeout):
        return {"error_type": "Timeout", "message": "ran out of time", "traceback": ""}
    message = str(error)
    if len(message) > 500:
        message = message[:500] + " ..."
    return {
        "error_type": type(error).__name__,
        "message": message,
        "traceback": short_traceback(error),
    }


def run_with_timeout(seconds: float, function, *args, **kwargs):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return function(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def execute_cells(cells: list[str], namespace: dict, cell_timeout: float) -> list[dict]:
    """Run each code cell in order; a failing cell is recorded and the next one still runs."""
    errors = []
    for index, source in enumerate(cells):
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
        try:
            run_with_timeout(cell_timeout, exec, code, namespace)
        except (Exception, CellTimeout, SystemExit, KeyboardInterrupt) as error:
            errors.append({"cell": index, **describe_error(error)})
    return errors


def to_arrays(value) -> tuple[dict, object]:
    """Describe one returned value and turn it into an array the wire can carry (or None)."""
    import numpy as np

    kind = type(value).__name__
    if isinstance(value, np.ndarray):
        kind, array = "ndarray", value
    elif type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        kind = "tensor"
        tensor = value.detach().cpu()
        if str(tensor.dtype) in ("torch.bfloat16",):
            tensor = tensor.float()
        array = tensor.numpy()
    elif value is None:
        return {"kind": "none"}, None
    elif isinstance(value, str):
        kind, array = "str", np.asarray(value)
    elif isinstance(value, (bool, int, float, complex, np.generic)):
        kind, array = "scalar", np.asarray(value)
    elif isinstance(value, (list, tuple)):
        kind = "list"
        try:
            array = np.asarray(value)
        except Exception:
            return {"kind": kind, "unsendable": "a list that is not a regular array"}, None
    else:
        return {"kind": kind, "unsendable": f"an object of type {kind}"}, None
    if array.dtype.hasobject:
        return {"kind": kind, "unsendable": "an array of Python objects"}, None
    return {"kind": kind, "dtype": str(array.dtype), "shape": list(array.shape)}, array


def encode_result(result, read_back: list = ()) -> tuple[dict, list]:
    """A function's return value -> (header, arrays). Tuples become several items.

    ``read_back``: arguments to send back as the call left them (header ``read_back``).
    """
    is_tuple = isinstance(result, tuple)
    values = list(result) if is_tuple else [result]
    arrays: list = []

    def encode(value) -> dict:
        item, array = to_arrays(value)
        if array is not None:
            item["array"] = len(arrays)
            arrays.append(array)
        return item

    header = {"ok": True, "tuple": is_tuple, "items": [encode(v) for v in values]}
    if read_back:
        header["read_back"] = [encode(v) for v in read_back]
    return header, arrays


def decode_args(specs: list, arrays: list, read_back: list | None = None):
    """Arguments from the wire: arrays (as NumPy or torch) and plain JSON values.

    Arrays marked ``read_back`` are also appended to ``read_back``: they are sent back after the
    call, as the function left them.
    """
    decoded = []
    for spec in specs:
        if "array" in spec:
            array = arrays[spec["array"]].copy()
            if spec.get("as") == "torch":
                import torch

                array = torch.from_numpy(array)
            if spec.get("read_back") and read_back is not None:
                read_back.append(array)
            decoded.append(array)
        else:
            value = spec["value"]
            # Sequences travel as JSON lists; a learner's code expects axes as a tuple.
            decoded.append(tuple(value) if isinstance(value, list) else value)
    return decoded


def serve(request_fd: int, reply_fd: int) -> None:
    from normlab.grader import protocol
    from normlab.grader.trap import forbidden_calls

    def forget_channel():
        # A process forked by the notebook must not talk to the grader: only this one does.
        for fd in (request_fd, reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    os.register_at_fork(after_in_child=forget_channel)

    read = protocol.blocking_reader(request_fd)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    forbidden: dict = {}
    while True:
        try:
            header, arrays = protocol.recv(read)
        except EOFError:
            return
        op = header.get("op")
        if op == "load":
            forbidden = header.get("forbidden", {})
            errors = execute_cells(header["cells"], namespace, header["cell_timeout"])
            names = sorted(k for k in namespace if not k.startswith("_"))
            protocol.send(reply_fd, {"ok": True, "names": names, "cell_errors": errors})
        elif op in ("call", "get"):
            name = header["name"]
            if name not in namespace:
                protocol.send(reply_fd, {"ok": False, "error_type": "Missing", "message": name})
                continue
            hits: list[str] = []
            try:
                read_back: list = []
                if op == "get":
                    result = namespace[name]
                else:
                    args = decode_args(header.get("args", []), arrays, read_back)
                    values = decode_args(header.get("kwargs", []), arrays, read_back)
                    kwargs = dict(zip(header.get("kwarg_names", []), values, strict=True))
                    with forbidden_calls(forbidden.get(name, []), hits):
                        result = run_with_timeout(
                            header["timeout"], namespace[name], *args, **kwargs
                        )
                reply, out = encode_result(result, read_back)
                reply["forbidden_used"] = hits
            except (Exception, CellTimeout, SystemExit, KeyboardInterrupt) as error:
                reply, out = {"ok": False, **describe_error(error), "forbidden_used": hits}, []
            protocol.send(reply_fd, reply, out)
        else:
            protocol.send(reply_fd, {"ok": False, "error_type": "Protocol", "message": str(op)})


def run_under_nanny() -> None:
    """Fork: the learner's code runs in the grandchild; this process only waits and reports.

    The grader is then not the learner code's parent, so ``os.kill(os.getppid(), 9)`` kills this
    nanny, never the grader. The nanny exits with the grandchild's status (re-raising its
    signal), so the grader still learns how the submission ended.
    """
    if os.environ.pop("NORMLAB_NO_NANNY", ""):
        return  # under bubblewrap our parent is the sandbox's init, which ignores such signals
    pid = os.fork()
    if pid == 0:
        return
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


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
    # Bounded fork bombs: the limit only binds an unprivileged user.
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))


def main(argv: list[str]) -> None:
    request_fd, reply_fd, memory_mb, cpu_seconds = (int(a) for a in argv[1:5])
    run_submission(request_fd, reply_fd, memory_mb, cpu_seconds)


def run_submission(request_fd: int, reply_fd: int, memory_mb: int, cpu_seconds: int) -> None:
    """Become the submission's process: nanny, unprivileged user, limits, then serve. Never returns."""
    run_under_nanny()
    drop_privileges()
    apply_limits(memory_mb, cpu_seconds)
    signal.signal(signal.SIGALRM, _on_alarm)
    os.environ["NORMLAB_GRADING"] = "1"
    # The learner's notebook sees an ordinary interpreter: no grader modules on sys.path beyond
    # the installed package, and argv without our descriptors.
    sys.argv = ["notebook"]
    try:
        serve(request_fd, reply_fd)
    except BaseException:
        traceback.print_exc()  # lands in the submission's log, shown with the grader's error
        sys.stderr.flush()
        os._exit(70)
    finally:
        # Skip interpreter teardown: learner objects' __del__ or atexit hooks may hang or print.
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
