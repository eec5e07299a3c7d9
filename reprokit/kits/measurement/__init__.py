"""What a kit measures around the training loop: the phases' memory, the energy, the clock at the hooks, the
other load on the CPUs. Of reprokit/kits/, only the contract and the framework-free code.
"""
