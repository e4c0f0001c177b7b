"""Judging methods run on a backend: single grading, pairwise comparison, smoothing, voting."""
