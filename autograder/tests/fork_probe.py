"""Run by test_forkserver.py through nbgrader_run.nbgrader (forked from the server, or afresh):

    python -m fork_probe report [STATUS]   prints, as JSON, what it finds itself started with; exits with STATUS
    python -m fork_probe hang PIDS         starts `sleep` below it, writes both pids to PIDS, and waits
"""
import json
import os
import sys
import time
import warnings

started_with = sorted(sys.modules)


def report(status: int = 0) -> None:
    from hpcdl_course import paths  # reads HPCDL_COURSE_ROOT when imported

    nbgrader_apps = sys.modules.get("nbgrader.apps")
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("shown?")
    server = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1])
    print(json.dumps({
        "argv": sys.argv, "cwd": os.getcwd(), "sys_path0": sys.path[0], "stdin": sys.stdin.read(),
        "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("HPCDL_", "PROBE_", "PYTHONWARNINGS"))},
        "path0": os.environ["PATH"].split(os.pathsep)[0],
        "course_root": str(paths.ROOT),
        "warnings_ignored": not caught,
        "preloaded": "nbgrader.apps" in started_with,
        "course_modules": [m for m in started_with if m.startswith(("hpcdl", "torch"))],
        "left by an earlier run": getattr(nbgrader_apps, "probe_was_here", None),
        # Forked: the server is the parent of its parent (the process that waits for it)
        "server": server, "server_threads": len(os.listdir(f"/proc/{server}/task")),
    }))
    print("to stderr", file=sys.stderr)
    os.environ["PROBE_LEAK"] = "from an earlier run"
    if nbgrader_apps is not None:
        nbgrader_apps.probe_was_here = True
    sys.exit(status)


def hang(pids: str) -> None:
    import subprocess

    sleeper = subprocess.Popen(["sleep", "600"])
    with open(pids + ".tmp", "w") as f:
        json.dump([os.getpid(), sleeper.pid], f)
    os.replace(pids + ".tmp", pids)
    time.sleep(600)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    report(*map(int, rest)) if mode == "report" else hang(*rest)
