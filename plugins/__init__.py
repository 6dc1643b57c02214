"""Built-in plugins (installed as ``orchestrator_plugins``): placers, sync strategies, hardware
adapters. Each subpackage registers its members through the ``orchestrator`` entry-point group."""
