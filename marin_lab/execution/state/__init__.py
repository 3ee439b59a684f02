"""What a driver writes while it runs: the status file and the lease on an output folder."""
