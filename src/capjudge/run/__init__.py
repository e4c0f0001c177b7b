"""The resumable run around a judge and its guards: checks before a run (preflight, inputcheck),
the lock and what --out may replace (outlock, outguard), the results file and resume (outfile),
the runner and the run's tally (runner, summary)."""
