"""Doing it: the step supervisor, the local and Ray backends, logs, watching, interrupts, the JAX platform
guard, and the run's own history (runs/)."""
