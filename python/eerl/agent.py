"""eerl.Agent: a connection to this node's eerld (include/eerl/agent.h), for the multi-node
adapters' node side. Owns one eerl_agent handle (and the eerl_device borrowed from it while open);
closing it (close(), garbage collection) disconnects, and eerld then resets every GPU this
connection leased.
"""

import ctypes as C

from . import _lib
from . import _types as T
from ._lib import EerlError

AGENT_PHASES = {"generation": T.AGENT_PHASE_GEN, "training": T.AGENT_PHASE_TRAIN,
                "idle": T.AGENT_PHASE_IDLE}
_fns = None


def _c():
    global _fns
    if _fns is not None:
        return _fns
    d = _lib.declare
    P, I, U, S = C.c_void_p, C.c_int, C.c_uint, C.c_size_t
    UP = C.POINTER(C.c_uint)
    _fns = {
        "socket_path": d("eerl_agent_socket_path", C.c_char_p, []),
        "connect": d("eerl_agent_connect", I, [C.c_char_p, C.c_char_p, C.c_char_p, S,
                                               C.POINTER(P)]),
        "free": d("eerl_agent_free", None, [P]),
        "last_error": d("eerl_agent_last_error", C.c_char_p, [P]),
        "info": d("eerl_agent_info", I, [P, C.POINTER(T.AgentInfo)]),
        "lease": d("eerl_agent_lease", I, [P, UP, S]),
        "release": d("eerl_agent_release", I, [P, UP, S]),
        "set_clocks": d("eerl_agent_set_clocks", I, [P, UP, S, U, U]),
        "define_pool": d("eerl_agent_define_pool", I, [P, C.c_char_p, UP, S, U, U, U]),
        "set_phase": d("eerl_agent_set_phase", I, [P, C.c_char_p, I]),
        "read": d("eerl_agent_read", I, [P, UP, S, C.POINTER(T.AgentReading), S,
                                         C.POINTER(S)]),
        "start_heartbeat": d("eerl_agent_start_heartbeat", I, [P, U]),
        "device": d("eerl_agent_device", I, [P, C.POINTER(P)]),
        "device_free": d("eerl_device_free", None, [P]),
        "clocks": d("eerl_device_supported_sm_clocks", I, [P, U, UP, S, C.POINTER(S)]),
        "count": d("eerl_device_count", I, [P, UP]),
        "uuid": d("eerl_device_uuid", I, [P, U, C.c_char_p, S]),
        "name": d("eerl_device_name", I, [P, U, C.c_char_p, S]),
    }
    return _fns


def _arr(gpus):
    gpus = [int(g) for g in gpus]
    return (C.c_uint * max(1, len(gpus)))(*gpus), len(gpus)


class Agent:
    """Connection to eerld at socket (None: $EERL_SOCKET or the default socket)."""

    def __init__(self, socket=None, name="eerl-python", heartbeat=True):
        self._a = None
        f = _c()
        why = C.create_string_buffer(512)
        a = C.c_void_p()
        path = socket.encode() if socket else None
        self.socket = socket or f["socket_path"]().decode()
        _lib.check(f["connect"](path, name.encode(), why, len(why), C.byref(a)),
                   "connecting to eerld at %s" % self.socket, lambda: why.value)
        self._a = a
        if heartbeat:
            self._check(f["start_heartbeat"](a, 0), "starting the heartbeat")

    def _check(self, rc, what):
        return _lib.check(rc, what, lambda: _c()["last_error"](self._a))

    def _live(self):
        if self._a is None:
            raise EerlError(-15, "the eerld connection is closed")
        return self._a

    def info(self):
        i = T.AgentInfo()
        self._check(_c()["info"](self._live(), C.byref(i)), "eerld info")
        return {"gpus": i.gpus, "heartbeat_ms": i.heartbeat_ms, "uid": i.uid,
                "may_lease": bool(i.may_lease), "server": i.server.decode()}

    def lease(self, gpus):
        a, n = _arr(gpus)
        self._check(_c()["lease"](self._live(), a, n), "leasing GPUs %s" % list(gpus))

    def release(self, gpus=()):
        a, n = _arr(gpus)
        self._check(_c()["release"](self._live(), a, n), "releasing GPUs %s" % list(gpus))

    def set_clocks(self, gpus, min_mhz, max_mhz):
        a, n = _arr(gpus)
        self._check(_c()["set_clocks"](self._live(), a, n, int(min_mhz), int(max_mhz)),
                    "setting GPUs %s to %s-%s MHz" % (list(gpus), min_mhz, max_mhz))

    def define_pool(self, name, gpus, gen_mhz, train_mhz, idle_mhz):
        a, n = _arr(gpus)
        self._check(_c()["define_pool"](self._live(), name.encode(), a, n, int(gen_mhz),
                                        int(train_mhz), int(idle_mhz)),
                    "defining pool %s on GPUs %s" % (name, list(gpus)))

    def set_phase(self, name, phase):
        if phase not in AGENT_PHASES:
            raise ValueError("eerld phase %r: use generation, training or idle" % (phase,))
        self._check(_c()["set_phase"](self._live(), name.encode(), AGENT_PHASES[phase]),
                    "switching pool %s to %s" % (name, phase))

    def read(self, gpus):
        """[(energy_mj, power_mw, sm_mhz)] for gpus; EerlError if a GPU could not be read."""
        res = []
        for g, (err, mj, mw, mhz) in zip(gpus, self.readings(gpus)):
            if err < 0:
                raise EerlError(err, "reading GPU %d through eerld" % g)
            res.append((mj, mw, mhz))
        return res

    def readings(self, gpus, state=False):
        """[(err, energy_mj, power_mw, sm_mhz)] for gpus, in their order: err 0, or the EERL_E*
        code of a GPU that could not be read (lost, no energy counter), as eerld answered it.
        With state, each also carries the GPU's own state: (..., has_reasons, reasons,
        limit_mw), its clock event reasons (has_reasons 0: the driver gave none) and the power
        limit it enforces (0: not read)."""
        a, n = _arr(gpus)
        out = (T.AgentReading * max(1, n))()
        got = C.c_size_t()
        self._check(_c()["read"](self._live(), a, n, out, n, C.byref(got)),
                    "reading GPUs %s" % list(gpus))
        by = {out[i].gpu: out[i] for i in range(got.value)}
        missing = [g for g in gpus if g not in by]
        if missing:
            raise EerlError(-10, "reading GPUs %s" % list(gpus),
                            "eerld answered no reading of GPU %d" % missing[0])
        rows = [(by[g].err, by[g].energy_mj, by[g].power_mw, by[g].sm_mhz) for g in gpus]
        if state:
            rows = [r + (by[g].has_reasons, by[g].reasons, by[g].limit_mw)
                    for r, g in zip(rows, gpus)]
        return rows

    def devices(self):
        """[{"gpu": NVML index, "uuid": ..., "name": ...}] for every GPU the daemon serves."""
        f = _c()
        dev = C.c_void_p()
        self._check(f["device"](self._live(), C.byref(dev)), "eerld device")
        try:
            n = C.c_uint()
            _lib.check(f["count"](dev, C.byref(n)), "counting eerld's GPUs")
            out = []
            buf = C.create_string_buffer(128)
            for g in range(n.value):
                _lib.check(f["uuid"](dev, g, buf, len(buf)), "UUID of GPU %d" % g)
                uuid = buf.value.decode()
                _lib.check(f["name"](dev, g, buf, len(buf)), "name of GPU %d" % g)
                out.append({"gpu": g, "uuid": uuid, "name": buf.value.decode()})
            return out
        finally:
            f["device_free"](dev)

    def supported_clocks(self, gpu):
        f = _c()
        dev = C.c_void_p()
        self._check(f["device"](self._live(), C.byref(dev)), "eerld device")
        try:
            buf = (C.c_uint * 512)()
            n = C.c_size_t()
            _lib.check(f["clocks"](dev, int(gpu), buf, 512, C.byref(n)),
                       "supported clocks of GPU %d" % gpu)
            return list(buf[:n.value])
        finally:
            f["device_free"](dev)

    def close(self):
        if self._a is not None:
            _c()["free"](self._a)
            self._a = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
