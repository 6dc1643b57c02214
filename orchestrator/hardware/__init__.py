"""Hardware: the cluster model (workers of devices with speeds, memory and links), the simulated
presets and device profiles, this machine's worker layout, TensorFlow gRPC clusters, calibration."""
