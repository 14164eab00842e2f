"""Mining: the recipe, the per-repository pipeline and its checks, candidates, hiding, removal, statements, the leak audit, revalidation, task images, and the run over Ray."""
