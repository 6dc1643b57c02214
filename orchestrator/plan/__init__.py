"""The data model of plans for clusters of mixed GPUs: the cluster (``cluster``), the layered profile of a
model (``profile``) and the plan itself (``plan``), with the readers and writers of their file formats.
Nothing here simulates or searches (that is ``orchestrator.planning``); nothing imports TensorFlow."""

from orchestrator.plan.cluster import GpuCluster, GpuType
from orchestrator.plan.plan import Pipeline, Plan, Replica, Stage
from orchestrator.plan.profile import LayeredProfile

__all__ = ["GpuCluster", "GpuType", "LayeredProfile", "Pipeline", "Plan", "Replica", "Stage"]
