"""Prints the startup command of the example: run.sh with train.py inside it."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
print((HERE / "run.sh").read_text().replace("@TRAIN_PY@", (HERE / "train.py").read_text().rstrip()))
