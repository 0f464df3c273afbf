"""File integrity and atomic writes: every output written whole or not at all (io), files checked against
their pins and dvc.lock's hashes (integrity, stage_deps, dvc_lock), checkpoints loaded without running code
(checkpoint)."""
