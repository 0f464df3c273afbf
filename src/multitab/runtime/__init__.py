"""Process and runtime: exit codes, signal handling and child processes (process), the machine and commit a
record names (provenance), CPU settings for training (cpu), the services of several machines (fleet_setup)."""
