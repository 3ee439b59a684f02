"""What a step is and where its output goes: steps and placeholders, identity hashing, sources, the
planner, resources."""
