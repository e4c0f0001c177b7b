"""The base every module may use: the exception tree (errors), secrets out of every text (redact),
lazy and moved names (lazyexport). It imports nothing of capjudge."""
