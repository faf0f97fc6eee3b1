"""The framework's side in the Ray tests: a worker actor that holds GPUs the way an RL
framework's rollout or training worker does (Ray assigns them; the actor never names them).
A module of its own so Ray's workers can import it (the nodes' PYTHONPATH has this folder)."""

import os

import ray


@ray.remote(num_cpus=0)
class Worker:
    def pid(self):
        return os.getpid()

    def visible(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES")
