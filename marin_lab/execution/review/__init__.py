"""What would happen, read without running anything: decisions, the baseline and explain, cost and
capacity, egress, the plan report."""
