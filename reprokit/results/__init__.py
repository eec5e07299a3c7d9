"""Result files: their schema, the store, provenance, and publishing a report folder."""
