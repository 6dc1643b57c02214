"""Progress bars that show the number that matters and stay quiet when output is not a terminal."""

from __future__ import annotations

import sys
from typing import Any


def enabled(setting: Any) -> bool:
    if setting in (True, "true", "True", 1):
        return True
    if setting in (False, "false", "False", 0, None):
        return False
    return sys.stderr.isatty()


class Bar:
    """A tqdm bar when enabled, else a no-op with the same calls."""

    def __init__(self, on: bool, total: int | None, desc: str, unit: str = "it"):
        self._bar = None
        if on:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(postfix, refresh=n == 0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
