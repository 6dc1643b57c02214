"""The data model of plans for clusters of mixed GPUs: the layered profile of a model (``profile``) and the plan itself
(``plan``), with the readers and writers of their file formats. The cluster a plan is for is hardware's
(``orchestrator.hardware.gpu_cluster``: GPU types, counts per zone, the ``Topology`` of links; its datasheet catalog
``orchestrator.hardware.catalog``). Nothing here simulates or searches (that is ``orchestrator.planning``); nothing
imports TensorFlow."""

from orchestrator.plan.plan import Pipeline, Plan, Replica, Stage
from orchestrator.plan.profile import LayeredProfile

__all__ = ["LayeredProfile", "Pipeline", "Plan", "Replica", "Stage"]
