"""Rollout generation. hf.py is the reference backend (transformers `generate`); a faster engine comes next."""
