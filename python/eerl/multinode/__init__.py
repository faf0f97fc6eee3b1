"""Many nodes through the framework's own engine (docs/integrations/multinode.md).

The controller runs once, in the driver (MultiNodeSession). Every node runs eerld, which owns that
node's clocks. The driver reaches the nodes through an adapter over the engine the framework
already runs, never a network protocol of eerl's own:

  RayAdapter               one Ray actor per node that holds a worker, placed on it with
                           NodeAffinitySchedulingStrategy, relaying to that node's eerld socket;
  TorchDistributedAdapter  one rank per node (e.g. each node's local rank 0) in a
                           torch.distributed group; the driver sends each node rank a command
                           point to point, the rank runs it against its eerld and replies.

The pools come from where the framework's workers are: each worker's record (where_am_i, asked
of Ray actors by ray_worker_gpus, of placement-group bundles by ray_placement_group_gpus, of
every rank by torch_gather_gpus) names its node and its GPUs by UUID, and the adapter's locate()
finds each GPU's NVML index in the eerld of the worker's node.

Both adapters carry the same few commands to a NodeServer on each node (devices, hello, lease,
a phase boundary's clock settings and energy read, close).

MultiNodeSession is eerl.Session's runtime (src/runtime, the same C session: observations, the
meter's counter model and flags, the controller, resume, the trace) over the GPUs of every node:
the runtime sees them as one remote device (eerl_device_open_remote), whose read asks every
node at once, and sets their clocks through a clock owner that sends them to the nodes. At
every phase boundary the driver sends one command to all nodes, all in flight together, that
sets the clocks the runtime changed and reads every GPU's energy counter, power and clock. This
package finds the nodes and pools, serves the node side, reaches each node's eerld and notices
lost nodes; it builds no observation and writes no trace line. At the session's start each
node's eerld release, GPUs, models and clock lists are checked. Closing it (or collecting it,
or the process exiting) releases every lease; eerld resets those GPUs. A node lost or failing
mid-run stops it: the others are released, the runtime ends the trace with a line naming the
node, and NodeLost / NodeError is raised.

One module per concern, imported one way (_session -> _adapters -> _server, _discovery):

  _server     NodeServer, the node side: the driver's commands against the node's eerld;
  _discovery  where the workers are: local_gpus, where_am_i and the records of Ray actors,
              placement-group bundles and torch.distributed ranks;
  _adapters   NodeError, NodeLost, TorchDistributedAdapter (and node_leaders), RayAdapter;
  _session    MultiNodeSession.

Import the names from eerl.multinode; the modules under it are not an interface.
"""

from .._lib import EerlError
from ._adapters import (NodeError, NodeLost, RayAdapter, TorchDistributedAdapter, _Adapter,
                        node_leaders)
from ._discovery import (local_gpus, ray_placement_group_gpus, ray_worker_gpus,
                         torch_gather_gpus, where_am_i)
from ._server import NodeServer
from ._session import MultiNodeSession

__all__ = ["MultiNodeSession", "RayAdapter", "TorchDistributedAdapter", "NodeServer",
           "NodeError", "NodeLost", "EerlError", "node_leaders", "local_gpus", "where_am_i",
           "ray_worker_gpus", "ray_placement_group_gpus", "torch_gather_gpus"]
