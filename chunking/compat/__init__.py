"""Drop-in entry points for code written against the systems in the seeds."""
