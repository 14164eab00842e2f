"""The leak audit: fingerprints of removed code (fingerprint) and the scan of start states and images (scan)."""
