"""The project's own building blocks (a package name a project may well choose)."""
