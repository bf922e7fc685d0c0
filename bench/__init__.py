"""The benchmarks (`python -m bench` runs them all). Importing the package puts litellm offline first."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
