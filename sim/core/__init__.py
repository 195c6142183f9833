"""What both simulators share: typed errors and config loading helpers."""
