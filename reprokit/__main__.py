import sys

from reprokit.cli import main
from reprokit.execute import stopping

if __name__ == "__main__":      # not when a run's child process imports this module (multiprocessing spawn)
    code = main()
    if stopping.stopped():
        stopping.exit_stopped(code)
    sys.exit(code)
