"""Names for the numpy array types the placement code passes around (float costs and times,
integer indices and assignments, masks), so signatures say what an array holds."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]   # costs, times, bytes, probabilities
IntArray = npt.NDArray[np.int64]       # node/device indices, assignments, CSR pointers
BoolArray = npt.NDArray[np.bool_]      # masks
AnyArray = npt.NDArray[Any]            # arrays whose dtype follows the caller's input
F32Array = npt.NDArray[np.float32]     # network inputs and recorded features (TensorFlow's float)
I32Array = npt.NDArray[np.int32]       # edge endpoints fed to TensorFlow
