"""Tiny random-weight models for tests and the offline demo (their scores mean nothing)."""
