"""The response cache: request keys and entries (pure) and their store on disk."""
