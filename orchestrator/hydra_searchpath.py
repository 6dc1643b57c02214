"""Puts the config directories of installed orchestrator plugins on Hydra's search path, so a
third-party package's ``conf/placer/NAME.yaml`` makes ``+placer=NAME`` work after ``pip install``."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class OrchestratorPluginSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from orchestrator.plugins import config_searchpath

        for path in config_searchpath():
            search_path.append(provider="orchestrator-plugin", path=path)
