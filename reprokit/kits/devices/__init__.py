"""The devices a probed script's run holds (``--devices N``), as the script sees them.

On a GPU the runner gives the process its N GPUs (CUDA_VISIBLE_DEVICES, or a container's device requests) and
the kit changes nothing. On a CPU the run gets N stand-in devices, each framework's own (stand_ins.py), set
before the script's first line and declared; and a script that asks for CUDA or NCCL on a run without a GPU is
stopped at that call, naming its file and line (no_gpu.py).

Like reprokit/kits/served_data, these modules import a framework's library inside their functions only: the package is
imported in every environment, before the framework is.
"""
