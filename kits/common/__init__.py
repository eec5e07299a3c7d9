"""Framework-free code shared by every kit."""
