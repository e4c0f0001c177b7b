"""Backends: VLMs that answer chat requests with text and token log-probabilities."""
