"""The GRPO trainer: loop.py is the table of contents; each step in it is a named call into one
file."""
