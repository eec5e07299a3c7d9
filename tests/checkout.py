"""The checkout the tests run in: its top folder (the tests read its files: the seeds, the corpus, the locks, the
reference reports). The package finds its own files through reprokit/resources.py; only the tests name the clone."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
