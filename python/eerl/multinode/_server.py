"""The node side of eerl.multinode: NodeServer, which runs on every node and executes the
driver's commands (devices, hello, lease, a phase boundary's clock settings and energy read,
close) against that node's eerld.

It reaches eerld only, through eerl.agent; it knows no adapter, no worker record and no session
(the adapters carry its commands and answers; the session decides what they are).
"""

import os
import socket as _socket
import time

from .._lib import EerlError


class _GaveUp(EerlError):
    """A command ran past the time the driver waits for it (see NodeServer.handle)."""


class NodeServer:
    """Runs on one node: executes the driver's commands against that node's eerld.

    A command that runs past the driver's wait (handle's timeout_s: eerld held, the node slow)
    has been given up by the driver, which raised NodeLost for this node. So this server then
    changes no clock (the rest of that command is skipped), releases every GPU it leased and
    closes its eerld connection (eerld resets them), answers why, and refuses every later
    command; a late command that changed nothing gives the node up as well. The wait is counted
    from when the command reached this node, so the node never gives up before the driver."""

    def __init__(self, socket=None):
        self.socket = socket
        self.agent = None
        self.gave_up = None   # why this server gave up, once it has
        self._deadline = None

    def _agent(self):
        if self.gave_up is not None:
            raise _GaveUp(-12, self.gave_up)  # EERL_ETIMEDOUT
        if self.agent is None:
            from ..agent import Agent
            self.agent = Agent(self.socket, name="eerl-multinode")
        return self.agent

    def _in_time(self):
        """Raises _GaveUp once the driver stopped waiting for this command."""
        if self._deadline is not None and time.monotonic() > self._deadline[0]:
            self.gave_up = ("gave up: %r ran past the driver's %g s wait for it, so this node "
                            "was released and applies nothing more" % self._deadline[1:])
            raise _GaveUp(-12, self.gave_up)  # EERL_ETIMEDOUT

    def _change(self):
        """The agent, for a call that changes a clock, a lease or a pool."""
        self._in_time()
        return self._agent()

    def handle(self, cmd, args, timeout_s=None):
        """Returns ("ok", result) or ("err", code, message): errors travel back as values so a
        failing node never leaves the collective half-done. timeout_s: how long the driver waits
        for the answer (None: no bound); past it, see the class."""
        if timeout_s is not None and cmd != "close":
            self._deadline = (time.monotonic() + float(timeout_s), cmd, float(timeout_s))
        try:
            r = getattr(self, "cmd_" + cmd)(**(args or {}))
            self._in_time()  # done, but late: the driver gave this node up all the same
            return ("ok", r)
        except _GaveUp as e:
            try:
                self.cmd_close()   # eerld resets every GPU this connection leased
            except EerlError:
                pass  # closed all the same: eerld resets them as the connection drops
            return ("err", e.code, str(e))
        except EerlError as e:
            return ("err", e.code, str(e))
        except Exception as e:  # a bug or a bad argument on the node: still report it
            return ("err", -1, "%s: %s" % (type(e).__name__, e))
        finally:
            self._deadline = None

    def cmd_ping(self):
        return {"host": _socket.gethostname(), "pid": os.getpid()}

    def cmd_devices(self):
        """Every GPU this node's eerld serves (NVML index, UUID, name), and where it listens."""
        a = self._agent()
        return {"host": _socket.gethostname(), "socket": a.socket, "gpus": a.devices()}

    def cmd_hello(self, gpus, describe=False):
        """This node's eerld (its hello: GPU count, server version) and, for the GPUs it serves
        of gpus, each one's model and supported clocks (describe; else gpus[0]'s clocks). A
        GPU that cannot be described is reported in "error", for the driver to name."""
        a = self._agent()
        info = a.info()
        if not describe:
            return {"info": info, "clocks": a.supported_clocks(gpus[0]) if gpus else []}
        out = {"info": info, "gpus": {}, "error": None}
        try:
            devs = {d["gpu"]: d for d in a.devices()}
            for g in gpus:
                if g in devs:
                    out["gpus"][str(g)] = {"name": devs[g]["name"], "uuid": devs[g]["uuid"],
                                           "clocks": a.supported_clocks(g)}
        except EerlError as e:
            out["error"] = (e.code, str(e))
        return out

    def cmd_lease(self, gpus):
        self._change().lease(gpus)

    def cmd_step(self, gpus, before=None, after=None):
        """One phase boundary on this node: sets the clocks of before ([[gpus, mhz], ...]; 0:
        the governor), reads gpus, then sets after. Returns [[err, energy_mj, power_mw, sm_mhz,
        has_reasons, reasons, limit_mw] per GPU read], err 0 or the EERL_E* code of a GPU eerld
        could not read (lost, no energy counter), which the driver's meter flags as it would on
        its own node; the last three are the GPU's clock event reasons and enforced power limit
        as eerld read them (agent.Agent.readings)."""
        for gs, mhz in before or ():
            self._change().set_clocks(gs, mhz, mhz)
        r = [list(x) for x in self._agent().readings(gpus, state=True)] if gpus else []
        for gs, mhz in after or ():
            self._change().set_clocks(gs, mhz, mhz)
        return r

    def cmd_close(self, release=True):
        if self.agent is not None:
            try:
                if release:
                    self.agent.release(())
            finally:
                self.agent.close()
                self.agent = None
