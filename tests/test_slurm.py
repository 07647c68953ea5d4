"""A class graded as a Slurm array: the recipe of docs/instructors.md, run on a real cluster.

The test starts a one-node cluster of its own from Debian's packages (``slurm-wlm``,
``munge``): munged, slurmctld and slurmd in the foreground, with every file (key, socket,
state, spool, logs) in the test's temporary folder and on free ports, so that it shares nothing
with a cluster the machine may already run. It submits the documented ``grade.sbatch`` with the
documented ``sbatch`` command, merges the shards with the documented ``normlab merge``, and
compares the result with one ``normlab grade`` run, byte for byte. Every daemon is stopped in a
finalizer, whatever happens.

It skips, saying why, where the cluster cannot start: without the packages, or not as root
(slurmd starts jobs as their owner). ``NORMLAB_REQUIRE_SLURM=1`` (``.ci/run`` sets it when it
has installed the packages) turns that skip into a failure.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S, ROOT, free_port, grading_budget

pytestmark = pytest.mark.isolation

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "sinfo", "squeue", "scancel")
# Reached only when something is wrong: a healthy cluster is up in a few seconds.
START_WAIT_S = 180


def documented_blocks() -> tuple[str, str, str]:
    """The three blocks of docs/instructors.md's Slurm recipe: the script, the submission and
    the merge, exactly as an instructor copies them."""
    text = (ROOT / "docs" / "instructors.md").read_text()
    section = text.split("A Slurm array:", 1)[1].split("A GitHub Actions matrix", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 3, blocks
    script, submit, merge = blocks
    assert script.startswith("#!/bin/bash\n#SBATCH --array=")
    return script, submit.strip(), merge.strip()


def cannot_start() -> str:
    missing = [name for name in DAEMONS + CLIENTS if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm test skipped: {', '.join(missing)} not found (apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        return "Slurm test skipped: slurmd starts jobs as their owner, so it must run as root"
    return ""


def skip_or_fail(reason: str) -> None:
    if os.environ.get("NORMLAB_REQUIRE_SLURM") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


SLURM_CONF = """\
ClusterName=normlab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
# No cgroups: the cluster must start in a container too. Nothing is enforced; the recipe's
# --cpus-per-task and --mem only schedule.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# The node is declared big enough for one task of the recipe (4 CPUs, 16 GB) whatever the
# machine has: the tasks then run one after another.
SlurmdParameters=config_overrides
NodeName={host} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=4 RealMemory=16384 State=UNKNOWN
PartitionName=grade Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _end_with_parent() -> None:
    """In the daemon, before it runs: SIGTERM when the test's process ends, even killed (Linux's
    PR_SET_PDEATHSIG), so that no daemon outlives a test that never reached its finalizer."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Cluster:
    def __init__(self, base: Path):
        self.base = base
        self.processes: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(base / "slurm.conf")}

    def log_tail(self) -> str:
        tails = []
        for path in sorted((self.base / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            tails.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(tails)

    def daemon(self, name: str, *arguments: str) -> None:
        log = open(self.base / "log" / f"{name}.out", "wb")  # noqa: SIM115 (closed with the process)
        self.processes.append(
            subprocess.Popen(
                [name, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=_end_with_parent,
            )
        )
        log.close()

    def start(self) -> str:
        """Starts the three daemons; '' once the node takes jobs, else why not."""
        base = self.base
        for folder in ("munge", "state", "spool", "log"):
            (base / folder).mkdir(mode=0o700)
        key = base / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge_socket = base / "munge" / "socket"
        self.daemon(
            "munged",
            "--foreground",
            "--force",
            f"--socket={munge_socket}",
            f"--key-file={key}",
            f"--pid-file={base / 'munge' / 'munged.pid'}",
            f"--log-file={base / 'log' / 'munged.log'}",
            f"--seed-file={base / 'munge' / 'seed'}",
        )
        host = socket.gethostname().split(".")[0]
        conf = base / "slurm.conf"
        conf.write_text(
            SLURM_CONF.format(
                host=host,
                base=base,
                munge_socket=munge_socket,
                ctld_port=free_port(),
                slurmd_port=free_port(),
            )
        )
        if not self.wait_for(munge_socket.exists):
            return "munged did not start"
        self.daemon("slurmctld", "-D", "-f", str(conf))
        self.daemon("slurmd", "-D", "-f", str(conf))
        if not self.wait_for(self.node_idle):
            return "the Slurm node did not come up"
        return ""

    def node_idle(self) -> bool:
        done = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def no_jobs(self) -> bool:
        done = subprocess.run(
            ["squeue", "--noheader"], env=self.env, capture_output=True, text=True, timeout=60
        )
        return done.returncode != 0 or not done.stdout.strip()

    def wait_for(self, ready) -> bool:
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                return False  # a daemon exited: its log says why
            if ready():
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        if (self.base / "slurm.conf").exists() and len(self.processes) == 3:
            # Jobs still running (only after a failure) are ended first, while slurmd is there
            # to hear that their steps ended: a step whose slurmd is gone waits for it forever.
            subprocess.run(
                ["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=60
            )
            self.wait_for(self.no_jobs)
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def cluster():
    reason = cannot_start()
    if reason:
        skip_or_fail(reason)
    # Unix sockets take at most 107 bytes of path: pytest's temporary folders can be longer.
    base = Path(tempfile.mkdtemp(prefix="normlab-slurm-"))
    running = Cluster(base)
    try:
        why = running.start()
        if why:
            skip_or_fail(f"Slurm test skipped: {why}\n{running.log_tail()}")
        yield running
    finally:
        running.stop()
        shutil.rmtree(base, ignore_errors=True)


def a_small_class(folder: Path) -> None:
    """Five students of the fastest lab (full marks, a blank lab) and one of lab 02: fewer than
    the recipe's eight shards, so that some shards are empty, as the last ones of a class can be."""
    handed_in = {
        "ana": "solutions/01_why_normalize.ipynb",
        "ben": "labs/01_why_normalize.ipynb",
        "cy": "solutions/01_why_normalize.ipynb",
        "dee": "labs/01_why_normalize.ipynb",
        "eve": "solutions/02_batchnorm.ipynb",
    }
    for student, source in handed_in.items():
        (folder / student).mkdir(parents=True)
        shutil.copy(ROOT / source, folder / student / Path(source).name)


def test_the_documented_slurm_array_grades_the_class_as_one_run_does(cluster, tmp_path):
    script, submit, merge = documented_blocks()
    course = tmp_path / "course"
    a_small_class(course / "submissions")
    (course / "grade.sbatch").write_text(script)
    # The jobs find this interpreter's normlab first; their cluster's configuration is ours.
    env = {
        **cluster.env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    budget = " ".join(grading_budget())  # options after the script's name reach normlab grade

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=course,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            preexec_fn=_end_with_parent,  # no `sbatch --wait` outlives a killed test either
        )

    submitted = shell(f"{submit} {budget}")
    assert submitted.returncode == 0, (submitted.stdout, submitted.stderr, cluster.log_tail())
    assert re.fullmatch(r"Submitted batch job \d+\n", submitted.stdout), submitted.stdout
    shards = sorted(course.glob("shard-*.json"))
    assert [p.name for p in shards] == sorted(f"shard-{i}.json" for i in range(1, 9))
    merged = shell(merge)
    assert merged.returncode == 0, merged.stderr

    one = shell(
        f"normlab grade submissions/ --json --csv one.csv --feedback one-feedback/ {budget}"
        " > one.json"
    )
    assert one.returncode == 0, one.stderr
    assert (course / "grades.csv").read_bytes() == (course / "one.csv").read_bytes()
    assert (course / "graded.json").read_bytes() == (course / "one.json").read_bytes()
    feedback = sorted(p.relative_to(course / "feedback") for p in (course / "feedback").rglob("*"))
    assert len([p for p in feedback if p.suffix == ".md"]) == 5  # and each one's .html
    for relative in feedback:
        merged_file, one_file = course / "feedback" / relative, course / "one-feedback" / relative
        assert merged_file.is_dir() or merged_file.read_bytes() == one_file.read_bytes()
    assert feedback == sorted(
        p.relative_to(course / "one-feedback") for p in (course / "one-feedback").rglob("*")
    )
    # The grades are the students' own: the solutions full marks, the blank labs none.
    rows = [line.split(",")[:4] for line in (course / "grades.csv").read_text().splitlines()[1:]]
    assert [row[0] for row in rows] == ["ana", "ben", "cy", "dee", "eve"]
    assert [row[2] == row[3] for row in rows] == [True, False, True, False, True]
