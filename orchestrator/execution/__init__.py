"""Real TensorFlow execution: a model's runtime (placed or on one device), placed functional clones,
measured steps, ``apply_placement``, and the training loop of one worker with its convergence tracking."""
