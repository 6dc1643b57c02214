"""The phases of a trial that use the placement core: placing the model (``placement``) and the
micro-batched pipeline of the chosen placement (``schedule``)."""
