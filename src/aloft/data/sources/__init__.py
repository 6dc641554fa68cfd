"""Dataset builders with their own data or dependencies, imported lazily by ``build_dataset``."""
