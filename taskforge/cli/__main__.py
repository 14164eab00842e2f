"""``python -m taskforge.cli``."""

from taskforge.cli import main

main()
