"""Puts the config directories of installed orchestrator plugins on Hydra's search path, so a
third-party package's ``conf/placer/NAME.yaml`` makes ``+placer=NAME`` work after ``pip install``;
and registers the typed schemas (``orchestrator.config.store``) that those YAML options extend.
Hydra calls this before every composition, so the ConfigStore is filled in time."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class OrchestratorPluginSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from orchestrator.config.store import register
        from orchestrator.plugins import config_searchpath

        register()

        for path in config_searchpath():
            search_path.append(provider="orchestrator-plugin", path=path)
