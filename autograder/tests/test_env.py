"""The pins in env/ and binder/: the CPU and GPU sets agree, and the GPU set resolves on Linux x86_64.

The resolution test asks pip for a dry run against PyPI's metadata (PEP 658: no wheel is downloaded).
It needs the network: offline, or with HPCDL_OFFLINE=1, it is skipped and says why.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from hpcdl_course import paths

ENV = paths.ROOT / "env"
PYPI = "https://pypi.org/simple"
# Wheels a Linux x86_64 machine with glibc 2.28 or newer installs (Ubuntu 20.04+, RHEL 8+).
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path) -> dict:
    """{canonical name: version} of a requirements or constraints file; every line must be name==version."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        assert m, f"{path.name}: {line!r} is not pinned as name==version"
        assert canonical(m[1]) not in out, f"{path.name}: {m[1]} is listed twice"
        out[canonical(m[1])] = m[2]
    return out


def test_cpu_and_gpu_sets_differ_only_in_mpich():
    cpu, gpu = pins(ENV / "requirements-cpu.txt"), pins(ENV / "requirements-gpu.txt")
    # GPU machines bring their own MPI; everything else, torch and triton included, is the same.
    assert set(cpu.items()) ^ set(gpu.items()) == {("mpich", cpu["mpich"])}


def test_binder_installs_the_cpu_set():
    assert pins(paths.ROOT / "binder" / "requirements.txt") == pins(ENV / "requirements-cpu.txt")


def test_constraints_agree_with_the_direct_pins():
    lock = pins(ENV / "constraints.txt")
    assert "torch" not in lock, "torch is pinned in requirements-*.txt only (its CPU build has a +cpu label)"
    direct = pins(ENV / "requirements-cpu.txt")
    assert {k: v for k, v in direct.items() if k != "torch"} == {k: lock.get(k) for k in direct if k != "torch"}


# Where packages come from is set here alone; how to reach an index (certificates, proxy) is kept from
# pip's configuration.
SOURCES = ("INDEX_URL", "EXTRA_INDEX_URL", "FIND_LINKS", "NO_INDEX", "CONSTRAINT", "REQUIREMENT", "PRE",
           "ONLY_BINARY", "NO_BINARY", "TARGET", "PREFIX", "USER", "CONFIG_FILE")
ACCESS = ("cert", "client-cert", "proxy", "trusted-host")


def _pip_config() -> dict:
    """pip's configuration ({key: value}, e.g. 'index-url', 'cert'), files and environment together."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                          timeout=60)
    return {m[1]: m[2] for m in re.finditer(r"^[^.\n]*\.([a-z-]+)='([^']*)'$", proc.stdout, re.M)}


def _configured_index(config: dict) -> str:
    """HPCDL_PYPI_INDEX_URL, else the index-url in pip's configuration (a mirror of PyPI), else PyPI.
    Extra indexes and find-links are left out on purpose: they may hold torch's CPU build."""
    index = os.environ.get("HPCDL_PYPI_INDEX_URL") or config.get("index-url", "").split(" ")[0] or PYPI
    return index.rstrip("/")


def _unreachable(index: str):
    """None if the index answers within 5 s, else why not."""
    if os.environ.get("HPCDL_OFFLINE") == "1":
        return "HPCDL_OFFLINE=1"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{index}/torch/", method="HEAD"), timeout=5)
    except urllib.error.HTTPError:
        return None  # it answered; pip will say what is wrong
    except (OSError, ValueError) as e:
        return f"{index} is unreachable ({e})"
    return None


def test_gpu_set_resolves_for_linux_x86_64(tmp_path):
    config = _pip_config()
    index = _configured_index(config)
    why = _unreachable(index)
    if why:
        pytest.skip(f"needs the package index to resolve env/requirements-gpu.txt: {why}")
    version = "%d.%d.%d" % sys.version_info[:3]
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
           "--ignore-installed", "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
           *[f"--platform={p}" for p in PLATFORMS], "--target", str(tmp_path / "none"), "--index-url", index,
           "-r", str(ENV / "requirements-gpu.txt"), "-c", str(ENV / "constraints.txt")]
    cmd += [f"--{key}={value}" for key, values in config.items() if key in ACCESS for value in values.split()]
    # PIP_CONFIG_FILE=os.devnull skips every configuration file: no find-links or extra index with torch's
    # CPU build (whose metadata needs no triton) can stand in for the CUDA build.
    env = {k: v for k, v in os.environ.items() if not (k.startswith("PIP_") and k[4:] in SOURCES)}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, (f"env/requirements-gpu.txt does not resolve for Linux x86_64, Python {version}, "
                                  f"from {index}:\n{proc.stderr[-4000:]}")
    resolved = {canonical(item["metadata"]["name"]): item for item in json.loads(report.read_text())["install"]}
    for name, pin in pins(ENV / "requirements-gpu.txt").items():
        assert resolved[name]["metadata"]["version"] == pin, name
    torch = resolved["torch"]
    assert "+" not in torch["metadata"]["version"], "resolved a local build of torch, not PyPI's CUDA build"
    needs = [r for r in torch["metadata"].get("requires_dist", []) if r.startswith(("triton", "nvidia-"))]
    assert any(r.startswith("triton==") for r in needs) and any(r.startswith("nvidia-") for r in needs), needs


def test_learner_lab_settings_match_the_installed_jupyterlab():
    """env/lab-overrides.json names real settings with valid values, and the nbgrader plugins that
    env/learner-lab.sh disables exist: a renamed one would silently stay visible."""
    schemas = pathlib.Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    for plugin, values in json.loads((ENV / "lab-overrides.json").read_text()).items():
        package, name = plugin.split(":")
        # JupyterLab's own plugins keep their schemas in lab/schemas, prebuilt extensions beside their code.
        schema = schemas / package / f"{name}.json"
        if not schema.exists():
            schema = schemas.parent.parent / "labextensions" / package / "schemas" / package / f"{name}.json"
        properties = json.loads(schema.read_text())["properties"]
        for key, value in values.items():
            allowed = [c["const"] for c in properties[key].get("oneOf", [])] or None
            assert allowed is None or value in allowed, (plugin, key, value)
    assert json.loads((ENV / "lab-overrides.json").read_text())[
        "@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    # Progress bars and the roofline explorer are widgets: without their state a reopened notebook shows
    # "Error displaying widget: model not found" where they were.
    assert json.loads((ENV / "lab-overrides.json").read_text())[
        "@jupyter-widgets/jupyterlab-manager:plugin"]["saveState"] is True
    script = (ENV / "learner-lab.sh").read_text()
    disabled = set(re.findall(r"@jupyter/nbgrader:[a-z-]+", script))
    assert disabled == {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                        "@jupyter/nbgrader:course-list"}
    bundle = "".join(p.read_text(errors="replace") for p in
                     (schemas.parent.parent / "labextensions" / "@jupyter" / "nbgrader" / "static").glob("*.js"))
    assert all(f'"{plugin}"' in bundle for plugin in disabled)


def test_setup_and_binder_share_the_learner_lab_script():
    assert 'bash env/learner-lab.sh "$VENV/bin/python"' in (ENV / "setup.sh").read_text()
    assert "bash env/learner-lab.sh python" in (paths.ROOT / "binder" / "postBuild").read_text()
    for script in ("setup.sh", "learner-lab.sh"):
        assert subprocess.run(["bash", "-n", str(ENV / script)]).returncode == 0, script


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_make_lab_passes_options_and_allows_root():
    proc = subprocess.run(["make", "-n", "lab", "LAB_ARGS=--no-browser --port=8888"], cwd=paths.ROOT,
                          capture_output=True, text=True)
    [line] = [line for line in proc.stdout.splitlines() if " lab --notebook-dir=course" in line]
    assert line.endswith("--no-browser --port=8888")
    assert ("--allow-root" in line) == (os.geteuid() == 0)
    proc = subprocess.run(["make", "-n", "release", "FORCE=1"], cwd=paths.ROOT, capture_output=True, text=True)
    assert 'HPCDL_RELEASE_FORCE="1"' in proc.stdout


def test_xdist_groups_keep_a_notebooks_tests_in_one_worker(tmp_path):
    """`make test` grades each notebook once because its tests share an xdist_group; a pytest and pytest-xdist
    pair that ignores the groups would grade it in every worker (about twice the time on two cores)."""
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('i', [pytest.param(i, marks=pytest.mark.xdist_group('one')) for i in range(6)])\n"
        "def test_where(i):\n"
        "    open(f'where-{i}', 'w').write(os.environ['PYTEST_XDIST_WORKER'])\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
                           "-p", "no:cacheprovider", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    workers = {p.read_text() for p in tmp_path.glob("where-*")}
    assert len(workers) == 1, f"the grouped tests ran in {sorted(workers)}"


def _prefix_with_this_venvs_packages(folder) -> pathlib.Path:
    """A venv at `folder` that imports this venv's packages (a .pth file) and has its own sys.prefix, so that
    what env/learner-lab.sh writes there (sys_prefix level) leaves this venv alone."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    import sysconfig
    pathlib.Path(site, "hpcdl-course-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for name in ("jupyter", "jupyter-labextension", "jupyter-server"):
        script = (pathlib.Path(sys.executable).parent / name).read_text().split("\n", 1)[1]
        (folder / "bin" / name).write_text(f"#!{python}\n{script}")
        (folder / "bin" / name).chmod(0o755)
    # What installing nbgrader writes there: its server extensions, all enabled (jupyter server extension
    # enable/disable refuses an extension that no such file lists).
    installed = pathlib.Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json"
    (folder / "etc" / "jupyter" / "jupyter_server_config.d").mkdir(parents=True)
    shutil.copy(installed, folder / "etc" / "jupyter" / "jupyter_server_config.d")
    return python


def _lab_config(prefix) -> tuple:
    """(disabled lab extensions, locked lab extensions, server extensions enabled) as `prefix`'s
    configuration files say."""
    page = prefix / "etc" / "jupyter" / "labconfig" / "page_config.json"
    config = json.loads(page.read_text()) if page.exists() else {}
    server = {}  # as Jupyter merges them: the .d folder's files in name order, then jupyter_server_config.json
    for path in sorted((prefix / "etc" / "jupyter").glob("jupyter_server_config.d/*.json")) + sorted(
            (prefix / "etc" / "jupyter").glob("jupyter_server_config.json")):
        server |= json.loads(path.read_text()).get("ServerApp", {}).get("jpserver_extensions", {})
    on = lambda d: {k for k, v in d.items() if v}  # noqa: E731
    return on(config.get("disabledExtensions", {})), on(config.get("lockedExtensions", {})), server


def test_only_the_learner_repository_locks_the_instructor_tools(tmp_path):
    """env/learner-lab.sh, as env/setup.sh runs it: in a learner distribution (.hpcdl-learner-dist at its root)
    nbgrader's formgrader, create-assignment and course-list are disabled and locked; in the instructor's
    repository they are enabled and unlocked, also in an environment an earlier learner set-up locked."""
    python = _prefix_with_this_venvs_packages(tmp_path / "venv")
    tools = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"}
    servers = {"nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"}
    env = {**os.environ, "JUPYTER_PATH": str(pathlib.Path(sys.prefix) / "share" / "jupyter")}
    env.pop("JUPYTER_CONFIG_DIR", None)
    ours = _lab_config(pathlib.Path(sys.prefix))
    for role in ("learner", "instructor"):
        repo = tmp_path / role
        shutil.copytree(ENV, repo / "env")
        if role == "learner":
            (repo / ".hpcdl-learner-dist").write_text("a learner distribution\n")
        proc = subprocess.run(["bash", str(repo / "env" / "learner-lab.sh"), str(python)], capture_output=True,
                              text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert f"{role} lab:" in proc.stdout
        overrides = tmp_path / "venv" / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
        assert json.loads(overrides.read_text()) == json.loads((ENV / "lab-overrides.json").read_text())
        disabled, locked, server = _lab_config(tmp_path / "venv")
        if role == "learner":
            assert tools <= disabled and tools <= locked, (disabled, locked)
            assert all(server.get(s) is False for s in servers), server
        else:  # the same environment, set up again from the instructor's repository
            assert not tools & disabled and not tools & locked, (disabled, locked)
            assert all(server.get(s) is True for s in servers), server
    assert _lab_config(pathlib.Path(sys.prefix)) == ours  # this venv's own configuration is left alone
