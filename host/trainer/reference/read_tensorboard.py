"""A run's TensorBoard folder as TensorBoard itself reads it (its EventAccumulator).

Usage: python read_tensorboard.py RUN/tensorboard
Prints JSON: {"scalars": {tag: [[step, value], ...]}, "images": {tag: [[step, width, height], ...]}}.
"""

import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "images": 0})
acc.Reload()
tags = acc.Tags()
print(
    json.dumps(
        {
            "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
            "images": {t: [[e.step, e.width, e.height] for e in acc.Images(t)] for t in tags["images"]},
        }
    )
)
