"""What happened: step and experiment records, provenance of code and environment, output manifests, usage."""
