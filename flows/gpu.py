"""GPU stages under Prefect: one global concurrency limit per visible CUDA device, and a slot of one of
them for each GPU stage (params.yaml orchestration.gpu_stages, gpu_concurrency)."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from typing import Any

from flows.dag import OrchestrationConfig, StagePlan

GPU_LIMIT_PREFIX = "multitab-gpu"


def gpu_limit_name(device: str) -> str:
    """The Prefect global concurrency limit of one GPU of this host: every flow run and worker here
    takes its slots, so two runs (or two workers) cannot put more stages on a device than it has slots."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname()).strip("-").lower() or "host"
    return f"{GPU_LIMIT_PREFIX}-{host}-{device}"


def gpu_slots_of(plan: StagePlan, cfg: OrchestrationConfig, gpu_concurrency: int | None) -> dict[str, int] | None:
    """Slots per visible CUDA device (device id -> slots), or None when GPU stages are not limited (no
    CUDA, or no GPU stage in the plan)."""
    if not any(s.split("@", 1)[0] in cfg.gpu_stages for s in plan.order):
        return None
    try:
        import torch
    except ImportError:
        return None
    n_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n_devices == 0:
        return None
    limit = gpu_concurrency or cfg.gpu_concurrency or n_devices
    # More slots than devices shares devices (useful for small models); fewer leaves devices idle.
    return {str(d): len(range(d, limit, n_devices)) for d in range(n_devices) if d < limit}


def ensure_gpu_limits(slots: dict[str, int], log: Any) -> None:
    """Create (or resize) the global concurrency limit of each device; the UI lists them under
    Concurrency, with the slots in use."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for device, n in slots.items():
            name = gpu_limit_name(device)
            try:
                current = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=n))
                log.info("created the global concurrency limit %s: %d slot(s)", name, n)
                continue
            if current.limit != n or not current.active:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=n, active=True))
                log.info("global concurrency limit %s: %d -> %d slot(s)", name, current.limit, n)


@contextlib.contextmanager
def gpu_slot(devices: list[str], log: Any) -> Iterator[str]:
    """Hold one slot of the least busy device's global concurrency limit; yields the device id."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    with get_client(sync_client=True) as client:
        free = {}
        for d in devices:
            limit = client.read_global_concurrency_limit_by_name(gpu_limit_name(d))
            free[d] = limit.limit - limit.active_slots
    device = max(devices, key=lambda d: free[d])
    if free[device] <= 0:
        log.info("waiting for a slot of GPU %s (%s)", device, gpu_limit_name(device))
    with concurrency(gpu_limit_name(device), occupy=1, strict=True, raise_on_lease_renewal_failure=False):
        yield device
