"""taskforge: mine verifiable coding tasks from real repositories.

Importing this package is cheap: Docker, git and everything heavy are imported inside the modules
and functions that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
