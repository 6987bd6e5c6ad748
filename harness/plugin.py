"""pytest plugin (registered through the pytest11 entry point). Filled in by the golden-store work."""
