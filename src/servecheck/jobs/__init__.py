"""Jobs of the run loop that compose engines, experiments and the log scan (`servecheck demo`)."""
