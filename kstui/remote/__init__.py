"""Executors that evaluate somewhere else: an SSH host (ssh.py) or a Ray cluster (ray.py)."""
