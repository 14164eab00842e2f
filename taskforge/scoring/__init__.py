"""Scoring: the tamper-resistant scorer, its tamper rules, reward rows, the HTTP reward server and its client."""
