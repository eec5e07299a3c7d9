import sys

from reprokit.cli import main

if __name__ == "__main__":      # not when a run's child process imports this module (multiprocessing spawn)
    sys.exit(main())
