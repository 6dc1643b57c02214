"""The phases of a trial (``orchestrator.trial.Trial.run`` reads as their sequence): what is resolved
before any run starts (``setup``), the MLflow run (``tracking``), placing the model (``placement``) and
the micro-batched pipeline of the chosen placement (``schedule``), training one worker or the
data-parallel workers (``training``). A plan for a GPU cluster is ``orchestrator.planning.phase``."""
