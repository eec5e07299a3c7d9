# A checkout of the library's own source beside its examples, as a clone of its repository has it. Imported
# instead of the installed package, it would need the jaxlib it was built with.
from jax.version import __version__, _minimum_jaxlib_version

import jaxlib.version

if jaxlib.version.__version__ != __version__:
  raise RuntimeError(f"jaxlib version {jaxlib.version.__version__} is incompatible with the source checkout's jax "
                     f"{__version__}; build jaxlib from this checkout (minimum {_minimum_jaxlib_version})")
