"""What reads records and profiles: report, whatif, fit, export, profiles."""
