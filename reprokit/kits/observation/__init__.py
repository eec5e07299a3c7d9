"""The probe's watch over a user's script: what it ran (observe), the bounds it declared (bounds) and what
the run showed about it (detectors). Of reprokit/kits/, it reads the training loop and below.
"""
