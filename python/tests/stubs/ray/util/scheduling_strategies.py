"""Stand-in of ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy."""


class NodeAffinitySchedulingStrategy:
    def __init__(self, node_id, soft, _spill_on_unavailable=False, _fail_on_unavailable=False):
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable
