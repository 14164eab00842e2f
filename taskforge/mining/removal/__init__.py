"""Removal agents: the deterministic libcst one (cst) and the LLM one (llm_agent)."""
