"""Stand-in of the Ray public API the RayAdapter uses, run in-process: ray.remote(**options)
(cls) -> an actor class with .options(scheduling_strategy=...).remote(*args); actor method
.remote() -> an object ref; ray.get(refs); ray.kill(actor); ray.nodes(). Placement is recorded
(placements: [(node_id, soft)]), not performed."""
from .util.scheduling_strategies import NodeAffinitySchedulingStrategy

_nodes = []
placements = []
killed = []


def set_nodes(nodes):
    _nodes[:] = nodes
    placements.clear()
    killed.clear()


def nodes():
    return [dict(n) for n in _nodes]


class ObjectRef:
    def __init__(self, value):
        self._value = value


class _Method:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        return ObjectRef(self._fn(*args, **kwargs))


class ActorHandle:
    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _Method(getattr(self._obj, name))


class ActorClass:
    def __init__(self, cls, options):
        self._cls, self._options = cls, dict(options)

    def options(self, **kwargs):
        return ActorClass(self._cls, dict(self._options, **kwargs))

    def remote(self, *args, **kwargs):
        s = self._options.get("scheduling_strategy")
        if isinstance(s, NodeAffinitySchedulingStrategy):
            if not any(n["NodeID"] == s.node_id and n["Alive"] for n in _nodes):
                raise ValueError("no alive node %s" % s.node_id)
            placements.append((s.node_id, s.soft))
        else:
            placements.append((None, None))
        return ActorHandle(self._cls(*args, **kwargs))


def remote(*args, **kwargs):
    if args and callable(args[0]) and not kwargs:
        return ActorClass(args[0], {})
    return lambda cls: ActorClass(cls, kwargs)


def get(refs):
    if isinstance(refs, list):
        return [r._value for r in refs]
    return refs._value


def kill(actor):
    killed.append(actor)
