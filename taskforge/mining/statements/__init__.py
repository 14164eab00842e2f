"""Problem statements: the template writer and the leak check (template), the LLM writer (llm)."""
