"""Framework-free code that host and kits both run: model arithmetic, parting, the ResNet layout, the CPU
peak, the certificate's checks, the datasets' files and the GPU's state. NumPy at most, and of reprokit/kits/ only
reprokit.kits.contract: the host imports it.
"""
