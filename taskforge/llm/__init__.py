"""The OpenAI-compatible client, and a scripted local server that stands in for a model in tests."""
