"""One repository before any task: its source, environment image, requirements, symbols, test suite, start state, and which files are tests."""
