"""Evaluation: sample completions (or read them from a file), grade them, report unbiased pass@k."""
