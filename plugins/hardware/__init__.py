"""Built-in hardware adapters."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_hardware_adapters():
    return {
        "local": "orchestrator_plugins.hardware.local:LocalHardware",
        "simulated": "orchestrator_plugins.hardware.simulated:SimulatedHardware",
        "auto": "orchestrator_plugins.hardware.simulated:WorkloadHardware",
        "tf_cluster": "orchestrator_plugins.hardware.tf_cluster:TFClusterHardware",
        "gpu_cluster": "orchestrator_plugins.hardware.gpu_cluster:GpuClusterHardware",
    }


@hookimpl
def orchestrator_config_schemas():
    return {f"hardware/{name}": f"orchestrator.config.hardware:{cls}" for name, cls in (
        ("local", "LocalHardwareConfig"), ("simulated", "SimulatedHardwareConfig"), ("auto", "AutoHardwareConfig"),
        ("tf_cluster", "TFClusterHardwareConfig"))} | {
        "hardware/gpu_cluster": "orchestrator.config.planning:GpuClusterHardwareConfig"}
