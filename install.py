#!/usr/bin/env python3
"""Set up nmspmm in one command, then run its main job: ``python3 install.py``.

1. A virtual environment in ``.venv`` (``--venv PATH`` or NMSPMM_VENV to move it). If the Python
   running this script already has torch (>= 2.6), the environment is layered on top of it and uses
   that torch and every package beside it: nothing already there is downloaded again (a GPU machine
   without internet works). Otherwise the environment is new and torch is installed: the CUDA
   build (``torch``) where ``nvidia-smi`` sees a GPU, else ``torch==2.13.0`` (override the choice
   with NMSPMM_TORCH, e.g. ``NMSPMM_TORCH="torch==2.13.0 --index-url <url>"``).
2. The test and Llama extras, only those missing: pytest, numpy, hypothesis, transformers (5.17 to 5.x),
   accelerate, safetensors, tqdm (and setuptools, wheel, ninja to build). One that cannot be installed
   stops the script with an error (the tests need every one of them); ``--allow-missing-extras``
   turns that into a warning, for a machine without network where they are carried in later.
3. Builds nmspmm in place (``pip install --no-build-isolation -e .``) against that torch; setup.py
   chooses CUDA or CPU-only on evidence and prints one line saying why (NMSPMM_BUILD_CUDA=0/1 to
   force). MAX_JOBS defaults to the number of cores. The full build log is build/install.log.
4. Runs the main job, ``python -m nmspmm.demo`` (skip with ``--no-demo``).

Then run the tests with ``.venv/bin/python -m pytest -q tests``.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv

ROOT = os.path.dirname(os.path.abspath(__file__))
MIN_TORCH = (2, 6)
CPU_TORCH = "torch==2.13.0"
# The transformers releases whose HfQuantizer extension point nmspmm's checkpoints use (nmspmm/hf.py).
TRANSFORMERS = "transformers>=5.17,<6"
# (distribution, import name, needed for): the extras the tests and the Llama demo use.
EXTRAS = [("pytest", "pytest", "tests"), ("numpy", "numpy", "tests"),
          ("hypothesis", "hypothesis", "tests"), (TRANSFORMERS, "transformers", "demo"),
          ("accelerate", "accelerate", "demo"), ("safetensors", "safetensors", "demo"), ("tqdm", "tqdm", "demo"),
          ("setuptools>=64", "setuptools", "build"), ("ninja", "ninja", "build")]

START = time.time()


def say(msg):
    print(f"[install {time.time() - START:5.0f} s] {msg}", flush=True)


def fail(msg):
    print(f"install.py: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, **kw)


def venv_python(path):
    return os.path.join(path, "Scripts" if os.name == "nt" else "bin",
                        "python.exe" if os.name == "nt" else "python")


# Printed as JSON by the environment's Python: what is installed (version or None).
PROBE = r"""
import importlib.metadata as md, json, sys
names = sys.argv[1:]
out = {}
for n in names:
    try:
        out[n] = md.version(n)
    except md.PackageNotFoundError:
        out[n] = None
try:
    import torch
    out["torch"] = torch.__version__
    out["torch.cuda"] = torch.version.cuda
except Exception as e:  # noqa: BLE001  (any failure means: no usable torch)
    out["torch"] = None
    out["torch.error"] = repr(e)
print(json.dumps(out))
"""


def probe(python, names=()):
    r = run([python, "-c", PROBE, *names], capture_output=True, text=True)
    if r.returncode != 0:
        return {}
    return json.loads(r.stdout.strip().splitlines()[-1])


def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def torch_ok(v):
    return v is not None and version_tuple(v)[:2] >= MIN_TORCH


def gpu_present():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    r = run([smi, "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def site_dirs():
    """Site-packages folders of the Python running this script (its own venv's, if it is one)."""
    import site
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def make_env(path):
    """Create (or reuse) the environment; returns its python."""
    py = venv_python(path)
    if os.path.exists(py):
        info = probe(py)
        if torch_ok(info.get("torch")):
            say(f"using the environment {path} (torch {info['torch']})")
            return py
        if not os.path.exists(os.path.join(path, "pyvenv.cfg")):
            fail(f"{path} exists and is not a virtual environment; pass --venv elsewhere")
        say(f"{path} has no usable torch: recreating it")
        shutil.rmtree(path)

    here = probe(sys.executable)
    if torch_ok(here.get("torch")):
        # Layer the environment over this Python: its site-packages (torch, transformers, ...) are
        # visible behind the environment's own, so nothing installed there is fetched again.
        say(f"{sys.executable} has torch {here['torch']} (CUDA {here.get('torch.cuda')}): the "
            f"environment {path} uses it and the packages beside it")
        venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)
        lines = [f"import site; site.addsitedir({d!r})" for d in site_dirs()]
        purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(purelib, "_nmspmm_base_site.pth"), "w") as f:
            f.write("\n".join(lines) + "\n")
        if run([py, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            run([py, "-m", "ensurepip", "--default-pip"], capture_output=True)
        return py

    say(f"new environment {path} ({sys.executable}, Python {sys.version.split()[0]}; it has no torch)")
    venv.EnvBuilder(with_pip=True, symlinks=os.name != "nt").create(path)
    spec = os.environ.get("NMSPMM_TORCH")
    if not spec:
        spec = "torch" if gpu_present() else CPU_TORCH
        why = "nvidia-smi sees a GPU" if spec == "torch" else "no GPU on this machine"
        say(f"installing {spec} ({why})")
    else:
        say(f"installing {spec} (NMSPMM_TORCH)")
    r = run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *spec.split()])
    if r.returncode != 0:
        fail(f"could not install torch ({spec}); install it into {path} by hand and rerun")
    return py


def missing_extras(py):
    """(distribution, import name) of the extras absent or at an unusable version, and the probe."""
    info = probe(py, [dist.split(">")[0].split("=")[0] for dist, _, _ in EXTRAS] + ["wheel"])
    missing = []
    for dist, name, _ in EXTRAS:
        have = info.get(name)
        if have is None or (dist == TRANSFORMERS and not (5, 17) <= version_tuple(have) < (6,)) \
                or (name == "setuptools" and version_tuple(have) < (64,)):
            missing.append((dist, name))
    return missing, info


def install_extras(py):
    missing, info = missing_extras(py)
    torch_version = info.get("torch")
    st = info.get("setuptools")
    if info.get("wheel") is None and (st is None or version_tuple(st) < (70, 1)):
        missing.append(("wheel", "wheel"))  # older setuptools need it for the editable build
    if not missing:
        say("test, Llama and build packages: all present")
        return []
    dists = [d for d, _ in missing]
    say(f"installing {' '.join(dists)} (torch pinned to {torch_version})")
    # torch==<installed> keeps pip from swapping torch for another build.
    pin = f"torch=={torch_version.split('+')[0]}"
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--retries", "1",
         "--timeout", "30", *dists, pin])
    return [d for d, _ in missing_extras(py)[0]]


def build(py):
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    log_path = os.path.join(ROOT, "build", "install.log")
    env = dict(os.environ)
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    cmd = [py, "-m", "pip", "install", "-v", "--disable-pip-version-check", "--no-deps",
           "--no-build-isolation", "-e", ROOT]
    say(f"building nmspmm (MAX_JOBS={env['MAX_JOBS']}; log: {os.path.relpath(log_path, ROOT)})")
    progress = re.compile(r"^\[(\d+)/(\d+)\]\s+(\S+).*?(\S+\.(?:cpp|cu|so))\b")
    shown = set()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            log.write(line)
            s = line.strip()
            if s.startswith("nmspmm setup:") and "linking" not in s:
                if s not in shown:  # pip runs setup.py twice (metadata, then the build)
                    shown.add(s)
                    say(s)
            else:
                m = progress.match(s)
                if m:
                    say(f"  [{m.group(1)}/{m.group(2)}] {os.path.relpath(m.group(4), ROOT) if os.path.isabs(m.group(4)) else m.group(4)}")
        rc = proc.wait()
    if rc != 0:
        with open(log_path) as f:
            tail = f.readlines()[-40:]
        sys.stderr.write("".join(tail))
        fail(f"the build failed (exit {rc}); the full log is {log_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", default=os.environ.get("NMSPMM_VENV", os.path.join(ROOT, ".venv")),
                    help="where the virtual environment lives (default: .venv)")
    ap.add_argument("--no-demo", action="store_true", help="skip the demo after the build")
    ap.add_argument("--allow-missing-extras", action="store_true",
                    help="warn instead of failing when a test or Llama extra cannot be installed")
    args = ap.parse_args()
    path = os.path.abspath(args.venv)

    py = make_env(path)
    still_missing = install_extras(py)
    if still_missing and not args.allow_missing_extras:
        fail(f"could not install {' '.join(still_missing)} (no network?): the tests need them. Carry "
             "their wheels in and `pip install` them into the environment, or rerun with "
             "--allow-missing-extras to build without them (the test files that import them then fail)")
    if still_missing:
        say(f"WARNING: could not install {' '.join(still_missing)} (--allow-missing-extras). The test "
            "files that import them fail until they are installed.")
    build(py)

    r = run([py, "-c", "import json, nmspmm; print(json.dumps(nmspmm.build_info()))"],
            capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        fail("nmspmm was built but does not import")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    kernels = f"CUDA kernels for {';'.join(info['cuda_archs'])}" if info["cuda"] else "CPU only"
    say(f"built nmspmm {info['version']} against torch {info['torch']}: {kernels} ({info['reason']})")

    if not args.no_demo:
        say(f"main job: {os.path.relpath(py, ROOT)} -m nmspmm.demo")
        r = run([py, "-m", "nmspmm.demo"], cwd=ROOT)
        if r.returncode != 0:
            fail(f"the demo failed (exit {r.returncode})")
    rel = os.path.relpath(py, ROOT) if py.startswith(ROOT) else py
    say(f"done. Run the tests with: {rel} -m pytest -q tests")
    if any(n in ("pytest",) for n in still_missing):
        fail("pytest is missing: the tests cannot run")


if __name__ == "__main__":
    main()
