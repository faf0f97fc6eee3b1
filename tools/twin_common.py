"""Shared by tools/calibrate, tools/fidelity-report, tools/capture-ceiling, tools/capture-table
and tools/prior-bench: the paper's sweep rows, the C twin's expected-value evaluation through
ctypes on libeerl.so (one implementation for fit and run), the update records of an eerl trace
and the capture bound's rows."""
import csv
import ctypes
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from eerl import tracefile  # noqa: E402  (the package's trace reader, from this source tree)
MODES = {"colocated": 0, "disaggregated": 1, "async-drained": 2, "async-inflight": 3}
MODEL_KEY = {"Qwen3-30B-A3B": "qwen3-30b-a3b", "Nemotron-Super-49B": "nemotron-super-49b"}
GPU_KEY = {"H100": "h100", "GB200": "gb200"}


def trace_updates(path, first=1):
    """The update records of an eerl trace (read by eerl.tracefile, the package's one trace
    reader), from update `first` on."""
    return [r for r in tracefile.read(path).updates if r["update"] >= first]


def read_bound(path=None):
    """The capture bound's rows (data/capture/bound.csv, which tools/capture-ceiling
    --regenerate writes): {(mode, updates, workload): row dict}. OSError when the file cannot be
    read; ValueError naming a row without mode, updates and workload."""
    path = path or os.path.join(ROOT, "data", "capture", "bound.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for r in rows:
        try:
            out[(r["mode"], int(r["updates"]), r["workload"])] = r
        except (KeyError, TypeError, ValueError):
            raise ValueError("a row without mode, updates and workload: %r" % (r,)) from None
    return out


def find_paper_dir():
    for d in (os.environ.get("EERL_PAPER_DATA", ""),
              os.path.join(ROOT, "..", "shared", "data", "paper"),
              os.path.join(ROOT, "shared", "data", "paper")):
        if d and os.path.exists(os.path.join(d, "sync_sweeps.csv")):
            return os.path.abspath(d)
    raise SystemExit("paper CSVs not found: set EERL_PAPER_DATA to the folder holding "
                     "sync_sweeps.csv and async_sweeps.csv")


def load_rows(paper_dir):
    rows = []
    for name in ("sync_sweeps.csv", "async_sweeps.csv"):
        with open(os.path.join(paper_dir, name)) as f:
            for r in csv.DictReader(f):
                a = r["alloc"].split("/")
                ng, nt = (int(a[0]), 0) if len(a) == 1 else (int(a[0]), int(a[1]))
                u0, u1 = (int(x) for x in r["updates"].split("-"))
                rows.append(dict(
                    table=r["table"], model=MODEL_KEY[r["model"]], gpu=GPU_KEY[r["gpu"]],
                    mode=r["mode"], imode=MODES[r["mode"]], alloc=r["alloc"], ng=ng, nt=nt,
                    size=r["size"], gen=r["gen_mhz"], train=r["train_mhz"],
                    g=0 if r["gen_mhz"] == "Gov" else int(r["gen_mhz"]),
                    t=0 if r["train_mhz"] == "Gov" else int(r["train_mhz"]),
                    u0=u0, u1=u1, dq=float(r["dq_pct"]), sv=float(r["saving_pct"])))
    return rows


class Twin:
    def __init__(self, lib_path):
        if not os.path.exists(lib_path):
            raise SystemExit("library %s not found: build first (cmake --build build) or pass "
                             "--lib" % lib_path)
        L = ctypes.CDLL(lib_path)
        L.eerl_twin_preset_new.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.POINTER(ctypes.c_void_p)]
        L.eerl_twin_preset_free.argtypes = [ctypes.c_void_p]
        L.eerl_twin_expected.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint,
                                         ctypes.c_uint, ctypes.c_char, ctypes.c_uint,
                                         ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                         ctypes.POINTER(ctypes.c_double),
                                         ctypes.POINTER(ctypes.c_double)]
        L.eerl_twin_embedded_params.restype = ctypes.c_char_p
        self.L = L

    def embedded(self):
        return self.L.eerl_twin_embedded_params().decode()

    def evaluate(self, params, rows):
        """params: dict (parameter file) or None (embedded). Returns [(dq, saving)] per row."""
        text = json.dumps(params).encode() if params is not None else None
        presets, out = {}, []
        dq, sv = ctypes.c_double(), ctypes.c_double()
        try:
            for r in rows:
                key = (r["model"], r["gpu"])
                if key not in presets:
                    p = ctypes.c_void_p()
                    e = self.L.eerl_twin_preset_new(key[0].encode(), key[1].encode(), text,
                                                    ctypes.byref(p))
                    if e < 0:
                        raise ValueError("preset %s/%s: error %d" % (key[0], key[1], e))
                    presets[key] = p
                e = self.L.eerl_twin_expected(presets[key], r["imode"], r["ng"], r["nt"],
                                              r["size"].encode(), r["g"], r["t"], r["u0"],
                                              r["u1"], ctypes.byref(dq), ctypes.byref(sv))
                if e < 0:
                    raise ValueError("row %s: error %d" % (r, e))
                out.append((dq.value, sv.value))
        finally:
            for p in presets.values():
                self.L.eerl_twin_preset_free(p)
        return out


class Config(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("n_gen", ctypes.c_uint), ("n_train", ctypes.c_uint),
                ("size", ctypes.c_char), ("seed", ctypes.c_uint64), ("run_id", ctypes.c_uint64),
                ("divergence", ctypes.c_double), ("noise", ctypes.c_uint)]


class Totals(ctypes.Structure):
    _fields_ = [("valid_tokens", ctypes.c_double), ("seconds", ctypes.c_double),
                ("joules", ctypes.c_double), ("updates", ctypes.c_uint)]


def gov_update_time(twin, params, model, gpu, imode, ng, nt, size, u0=5, u1=25):
    """Mean governor update time (s) of a configuration, seed 1, no divergence."""
    L = twin.L
    L.eerl_twin_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Config), ctypes.c_uint,
                                ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                ctypes.POINTER(Totals)]
    p = ctypes.c_void_p()
    if L.eerl_twin_preset_new(model.encode(), gpu.encode(), json.dumps(params).encode(),
                              ctypes.byref(p)) < 0:
        raise ValueError("preset %s/%s" % (model, gpu))
    try:
        c, t = Config(imode, ng, nt, size.encode(), 1, 0, 0.0), Totals()
        if L.eerl_twin_run(p, ctypes.byref(c), 0, 0, u0, u1, ctypes.byref(t)) < 0:
            raise ValueError("run %s/%s" % (model, gpu))
        return t.seconds / t.updates
    finally:
        L.eerl_twin_preset_free(p)


def metrics(pairs):
    """pairs: [(paper_dq, twin_dq, paper_sv, twin_sv)] -> dict of RMSE/MAE."""
    n = len(pairs)
    if n == 0:
        return dict(n=0, rmse_dq=float("nan"), mae_dq=float("nan"), rmse_sv=float("nan"),
                    mae_sv=float("nan"))
    ed = [p[1] - p[0] for p in pairs]
    es = [p[3] - p[2] for p in pairs]
    return dict(n=n, rmse_dq=(sum(e * e for e in ed) / n) ** 0.5,
                mae_dq=sum(abs(e) for e in ed) / n,
                rmse_sv=(sum(e * e for e in es) / n) ** 0.5,
                mae_sv=sum(abs(e) for e in es) / n)
