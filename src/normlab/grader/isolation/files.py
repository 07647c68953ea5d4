"""Files a submission could have touched: opened once by descriptor, removed without recursion.

Rules the parent follows for any folder a child can write to:

* it never opens a path inside it by name (the child could have put a symlink or a FIFO there);
  the child's log is an anonymous file in the parent's private folder, handed over as a
  descriptor, and read back through the parent's own descriptor;
* it removes such a folder with :func:`remove_tree`: descriptor-relative, never following a
  symlink, one directory level at a time (a tree 5,000 folders deep needs no recursion and at
  most two open descriptors), making unreadable folders readable as it goes.

Notebooks are read with :func:`read_regular_file`: ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO does not
block), only regular files, the size checked on the open descriptor before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
DIR_FLAGS = OPEN_FLAGS | getattr(os, "O_DIRECTORY", 0)


class FileTooLarge(ValueError):
    pass


def _open_not_following(path) -> int:
    """A descriptor of ``path`` opened with ``OPEN_FLAGS`` (its last component not followed:
    ValueError for a symbolic link)."""
    try:
        return os.open(path, OPEN_FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError("the file is a symbolic link") from None
        raise


def read_regular_file(path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (ValueError otherwise).

    The last path component is not followed if it is a symlink, a FIFO or device is refused
    without blocking, and the size is checked before reading (then enforced while reading, in
    case the file grows).
    """
    fd = _open_not_following(path)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise FileTooLarge(f"the file is larger than {limit >> 20} MB")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(f"the file is larger than {limit >> 20} MB")
        return b"".join(chunks)
    finally:
        os.close(fd)


def regular_file_lines(path, max_line: int, max_total: int):
    """The lines of a regular file (bytes, without their end), opened as ``read_regular_file``
    opens one. A line longer than ``max_line`` bytes is skipped without being held (None in its
    place); the lines given stop before ``max_total`` bytes (a skipped line holds none of
    them). ValueError for what is not a regular file."""
    fd = _open_not_following(path)
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        total = 0
        while True:
            line = stream.readline(max_line + 1)
            if not line:
                return
            if len(line) <= max_line or line.endswith(b"\n"):
                total += len(line)
                if total > max_total:
                    return
                yield line.rstrip(b"\n")
                continue
            while line and not line.endswith(b"\n"):  # the rest of a line too long: skipped
                line = stream.readline(1 << 20)
            yield None


def anonymous_file(folder: str) -> int:
    """A read-write descriptor to a file with no name (nobody can swap it for a link)."""
    try:
        return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        fd, name = tempfile.mkstemp(dir=folder)
        os.unlink(name)
        return fd


def tail(fd: int, limit: int) -> str:
    """The last ``limit`` bytes of an open file, as text (never blocks: a regular file)."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, limit, max(0, size - limit))
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        # A folder the child made unreadable (chmod 000): it is ours to remove, so read it.
        os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything below it, whatever a child left there.

    Iterative and descriptor-relative: symlinks are removed, never followed; FIFOs, sockets and
    devices are unlinked, never opened; depth costs no stack and no descriptors. The walk goes
    down one folder at a time and comes back up through ``..``, checked against the folder it
    came from (device and inode), so a folder moved meanwhile stops the walk instead of
    removing something else.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return
    fd = _open_dir(path, None)
    route: list[tuple[str, os.stat_result]] = []  # (name in parent, parent's stat)
    try:
        while True:
            here = os.fstat(fd)
            deeper = None
            with os.scandir(fd) as entries:
                names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for name, is_dir in names:
                if is_dir:
                    deeper = name
                    break
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except PermissionError:
                    os.chmod(fd, 0o700)
                    os.unlink(name, dir_fd=fd)
            if deeper is not None:
                try:
                    child = _open_dir(deeper, fd)
                except NotADirectoryError:
                    continue  # swapped for something else meanwhile: seen on the next pass
                route.append((deeper, here))
                os.close(fd)
                fd = child
                continue
            if not route:
                os.close(fd)
                fd = -1
                os.rmdir(path)
                return
            name, parent_stat = route.pop()
            parent = os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            if not _same(os.fstat(fd), parent_stat):
                raise OSError(f"a folder below {path} moved while it was being removed")
            try:
                os.rmdir(name, dir_fd=fd)
            except PermissionError:
                os.chmod(fd, 0o700)
                os.rmdir(name, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
