"""The execution runtime: worker pool, managed-input coordination, deadlines, recovery."""

from m3grpc.runtime.service import Runtime, default_harnesses
from m3grpc.runtime.worker import WorkerSettings

__all__ = ["Runtime", "WorkerSettings", "default_harnesses"]
