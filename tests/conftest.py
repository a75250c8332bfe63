"""Test-session settings.

Torch's intra-op threads fight each other when the few cores of a CI machine
are shared (the tensors here are small), which made parts of the suite 10x
slower under load; one thread per process keeps the run time predictable.
"""

import torch

torch.set_num_threads(1)
