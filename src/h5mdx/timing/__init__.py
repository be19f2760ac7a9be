"""Per-task timing: records, capture, straggler analysis and plots."""
