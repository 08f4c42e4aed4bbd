"""What evo hands to users: promoted packages (promote, confirm, verify), benchmarks, seed reports,
the doctor."""
