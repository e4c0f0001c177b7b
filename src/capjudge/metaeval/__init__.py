"""Meta-evaluation: agreement of a judge with human judgments."""
