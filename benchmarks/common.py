"""Helpers shared by the benchmark scripts: TF32 control, environment record, clock sampling,
progress line, CSV/JSON output. Needs only the standard library (+ torch where noted), so the
scripts run on the GPU machine, which has torch/triton/transformers/numpy and nothing else.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, Iterable, List, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# FP32 lanes per SM by compute capability major.minor (CUDA programming guide, arithmetic
# instruction throughput table): 64 on sm_60/70/75/80, 128 on sm_86/89/90/100/120.
_FP32_LANES = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
NOMINAL_FP32_TFLOPS_H100 = 66.9  # 132 SMs x 128 lanes x 2 x 1.98 GHz (shared docs/baselines.md)


def fp32_lanes_per_sm(cc) -> int:
    return _FP32_LANES.get(tuple(cc), 128)


# ------------------------------------------------------------------------------------ TF32
def set_tf32(enabled: bool) -> None:
    """Turn TF32 for fp32 matmuls on/off. Uses only the new ``fp32_precision`` API when torch has
    it: torch >= 2.9 raises if the legacy ``allow_tf32`` and the new API are mixed."""
    import torch

    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        mm.fp32_precision = "tf32" if enabled else "ieee"
    else:  # torch < 2.9
        mm.allow_tf32 = enabled


def tf32_setting() -> str:
    import torch

    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        return f"fp32_precision={mm.fp32_precision}"
    return f"allow_tf32={mm.allow_tf32}"


# ------------------------------------------------------------------------------------ stats
def geomean(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not xs:
        return float("nan")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def median(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(xs) if xs else float("nan")


# ------------------------------------------------------------------------------------ progress
class Progress:
    """A one-line progress indicator on stderr (tqdm is not installed on the GPU machine)."""

    def __init__(self, total: int, desc: str = "", enabled: bool = True, width: int = 28):
        self.total = max(1, total)
        self.n = 0
        self.desc = desc
        self.enabled = enabled and total > 0
        self.width = width
        self.t0 = time.time()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def update(self, k: int = 1, note: str = "") -> None:
        self.n += k
        if not self.enabled:
            return
        now = time.time()
        if self._tty and now - self._last < 0.2 and self.n < self.total:
            return
        if not self._tty and now - self._last < 15 and self.n < self.total:
            return  # logs: one line every 15 s
        self._last = now
        frac = min(1.0, self.n / self.total)
        el = now - self.t0
        eta = el / frac - el if frac > 0 else float("nan")
        bar = "#" * int(frac * self.width)
        line = (f"{self.desc} [{bar:<{self.width}}] {self.n}/{self.total} "
                f"{100 * frac:5.1f}% {el:6.0f}s elapsed, eta {eta:5.0f}s  {note[:60]}")
        if self._tty:
            sys.stderr.write("\r" + line + " " * 4)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def log(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------ output checks
class OutputMismatch(RuntimeError):
    """A benchmark row whose output does not match its reference: the run stops."""


# The tolerances of the GPU tests (tests/test_cuda_kernels.py): fp32 |y - ref| <= 1e-4 |ref| +
# 1e-4 scale elementwise and ||y - ref|| / ||ref|| < 1e-5; fp16 / bf16 (inputs already in the dtype:
# fp32 accumulation, one rounding of the output) rtol = finfo(dtype).eps, atol = 1e-4 scale. scale
# is max(|x| @ |W|^T), the largest partial sum.
def check_output(y, ref, scale: float, what: str) -> float:
    """Checks y against its float64 reference before the row is timed; raises OutputMismatch (a
    NaN anywhere fails). Returns the relative Frobenius error."""
    import torch

    yd = y.detach().to(torch.float64)
    if yd.shape != ref.shape:
        raise OutputMismatch(f"{what}: output shape {tuple(yd.shape)} != reference {tuple(ref.shape)}")
    if y.dtype == torch.float32:
        rtol, atol, rel_bound = 1e-4, 1e-4 * scale, 1e-5
    else:
        rtol, atol, rel_bound = torch.finfo(y.dtype).eps, 1e-4 * scale, None
    diff = (yd - ref).abs()
    bad = ~(diff <= atol + rtol * ref.abs())  # NaN compares false: counted as bad
    den = ref.norm().item()
    rel = (yd - ref).norm().item() / den if den > 0 else (yd - ref).norm().item()
    if bool(bad.any()) or (rel_bound is not None and not rel < rel_bound):
        raise OutputMismatch(f"{what}: output MISMATCH against the float64 reference: {int(bad.sum())} of "
                             f"{bad.numel()} elements outside |y - ref| <= {rtol:.1e} |ref| + {atol:.2e}, "
                             f"relative Frobenius error {rel:.3e}")
    return rel


# ------------------------------------------------------------------------------------ environment
def git_revision(path: str = REPO_ROOT) -> Dict[str, object]:
    """The tree a run measures: HEAD's commit (`git rev-parse HEAD`), the tree hash of its csrc/
    (`git rev-parse HEAD:csrc`, which names the library code whatever the commit), whether tracked
    files differ from HEAD (dirty) and whether csrc/ does (csrc_dirty), and, when dirty, the
    files that differ and a sha256 of `git diff HEAD` (the same hash means the same edits)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, timeout=30).stdout
    try:
        sha = git("rev-parse", "HEAD").strip() or "unknown"
        csrc = git("rev-parse", "HEAD:csrc").strip() or "unknown"
        changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
        out: Dict[str, object] = {"sha": sha, "csrc_tree": csrc, "dirty": bool(changed),
                                  "csrc_dirty": any(f.startswith("csrc/") for f in changed)}
        if changed:
            out["changed_files"] = changed[:50]
            out["diff_sha256"] = hashlib.sha256(git("diff", "HEAD").encode()).hexdigest()
        return out
    except (OSError, subprocess.SubprocessError):
        return {"sha": "unknown", "csrc_tree": "unknown", "dirty": None, "csrc_dirty": None}


def _nvsmi_id(device_index: int) -> str:
    """The device's id for ``nvidia-smi -i``: its UUID when torch exposes it (robust to
    CUDA_VISIBLE_DEVICES reordering), else the visible index."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device_index).uuid)
        if uuid and uuid != "None":
            return uuid if uuid.startswith("GPU-") else "GPU-" + uuid
    except Exception:
        pass
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in vis.split(",") if v.strip()]
    return ids[device_index] if device_index < len(ids) else str(device_index)


def nvidia_smi(fields: Sequence[str], device_index: int = 0, timeout: float = 10.0) -> Optional[Dict[str, str]]:
    """Query nvidia-smi for one GPU; None when unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                            "-i", _nvsmi_id(device_index)], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or not r.stdout.strip():
            r = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                                "-i", str(device_index)], capture_output=True, text=True, timeout=timeout)
        line = r.stdout.strip().splitlines()[0]
        vals = [v.strip() for v in line.split(",")]
        return dict(zip(fields, vals)) if len(vals) == len(fields) else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _num(v: Optional[str]) -> Optional[float]:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class ClockSampler:
    """Samples the SM clock (and power, temperature, utilization) with nvidia-smi in a background
    thread while the benchmark runs. ``summary()`` reports the clock under load: the median over
    samples with utilization >= 50% (all samples if none qualifies)."""

    FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "utilization.gpu")

    def __init__(self, device_index: int = 0, interval_s: float = 1.0):
        self.device_index = device_index
        self.interval = interval_s
        self.samples: List[Dict[str, Optional[float]]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.available = shutil.which("nvidia-smi") is not None

    def start(self) -> "ClockSampler":
        if self.available:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            q = nvidia_smi(self.FIELDS, self.device_index, timeout=5.0)
            if q is not None:
                self.samples.append({k: _num(v) for k, v in q.items()} | {"t": time.time()})
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def summary(self) -> Dict[str, object]:
        clocks = [s["clocks.sm"] for s in self.samples if s.get("clocks.sm")]
        busy = [s["clocks.sm"] for s in self.samples
                if s.get("clocks.sm") and (s.get("utilization.gpu") or 0) >= 50]
        use = busy or clocks
        power = [s["power.draw"] for s in self.samples if s.get("power.draw")]
        temp = [s["temperature.gpu"] for s in self.samples if s.get("temperature.gpu")]
        return {
            "n_samples": len(self.samples), "n_busy_samples": len(busy),
            "sm_clock_mhz_median": median(use) if use else None,
            "sm_clock_mhz_min": min(use) if use else None,
            "sm_clock_mhz_max": max(use) if use else None,
            "power_w_median": median(power) if power else None,
            "temperature_c_max": max(temp) if temp else None,
        }


def collect_env(device: str = "cuda") -> Dict[str, object]:
    """Everything needed to interpret a result file later."""
    import torch

    env: Dict[str, object] = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "device": device,
        "nmspmm_git": git_revision(),
        "argv": sys.argv,
    }
    for mod in ("triton", "transformers", "numpy", "nmspmm"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 -- record why, never fail here
            env[mod] = f"unavailable ({type(e).__name__})"
    try:
        import nmspmm

        env["nmspmm_cuda_kernels"] = bool(nmspmm.cuda_kernels_built())
        env["nmspmm_path"] = os.path.dirname(nmspmm.__file__)
    except Exception:
        env["nmspmm_cuda_kernels"] = False
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        cc = (p.major, p.minor)
        env.update({
            "gpu_name": p.name,
            "compute_capability": f"{p.major}.{p.minor}",
            "sm_count": p.multi_processor_count,
            "fp32_lanes_per_sm": fp32_lanes_per_sm(cc),
            "gpu_memory_gib": round(p.total_memory / 2**30, 1),
            "l2_cache_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        })
        q = nvidia_smi(("driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit",
                        "ecc.mode.current", "pstate"), idx)
        if q:
            env["driver"] = q.get("driver_version")
            env["sm_clock_mhz_idle"] = _num(q.get("clocks.sm"))
            env["sm_clock_mhz_max"] = _num(q.get("clocks.max.sm"))
            env["mem_clock_mhz"] = _num(q.get("clocks.mem"))
            env["power_limit_w"] = _num(q.get("power.limit"))
            env["ecc"] = q.get("ecc.mode.current")
        else:
            env["driver"] = "unknown (nvidia-smi unavailable)"
            try:  # needs pynvml; returns MHz
                env["sm_clock_mhz_max"] = float(torch.cuda.clock_rate(idx))
                env["sm_clock_source"] = "torch.cuda.clock_rate"
            except Exception:
                env["sm_clock_mhz_max"] = None
    return env


def fp32_peak_tflops(env: Dict[str, object], clock_mhz: Optional[float]) -> Optional[float]:
    """SMs x FP32 lanes x 2 (FMA) x clock."""
    sms, lanes = env.get("sm_count"), env.get("fp32_lanes_per_sm")
    if not (sms and lanes and clock_mhz):
        return None
    return sms * lanes * 2 * clock_mhz * 1e6 / 1e12


# ------------------------------------------------------------------------------------ output
def default_out_dir(prefix: str) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(REPO_ROOT, "benchmarks", "results", f"{prefix}_{stamp}")


def _csv_value(v):
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.6g}"
    if v is None:
        return ""
    return v


def write_csv(path: str, rows: List[Dict[str, object]], columns: Optional[Sequence[str]] = None) -> None:
    if columns is None:
        columns = []
        for r in rows:
            for k in r:
                if k not in columns:
                    columns.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in columns})


def _json_default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _clean(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_clean(obj), f, indent=1, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def load_results(path: str, name: str) -> Dict[str, object]:
    """Load ``<path>/<name>.json`` (or ``path`` itself when it is a .json file)."""
    f = path if path.endswith(".json") else os.path.join(path, f"{name}.json")
    with open(f) as fh:
        return json.load(fh)
