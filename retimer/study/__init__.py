"""Studies, pure: the design and who sees which condition, conversations, and the rating page."""
