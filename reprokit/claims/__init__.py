"""Claims about published numbers and their verdicts."""
