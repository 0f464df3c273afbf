"""What a flow run's page says about its inputs: a name from its targets and commit, tags for the protocol
and each dataset's data source, and a `run-provenance` artifact with the commit, params.yaml's sha256 and
the params keys that differ from the commit's params.yaml. Read from the project, never from the run."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, load_params, parse_yaml
from multitab.runtime.provenance import FLOW_RUN_ENV, git_commit

# Set in a worker's environment (`python -m flows.fleet worker`): the checkout of that machine, which every
# run the worker executes uses as its project, whatever `root` the run names.
WORKER_ROOT_ENV = "MULTITAB_WORKER_ROOT"


@dataclass(frozen=True)
class RunProvenance:
    commit: str  # HEAD of the project's repository, "unknown" outside one
    params_sha256: str
    protocol: str | None  # params.yaml's `protocol` (None: a project without it)
    sources: dict[str, str] = field(default_factory=dict)  # dataset -> standin | local | remote
    changed: list[str] = field(default_factory=list)  # params keys that differ from the commit's file
    params_committed: bool = True  # False: params.yaml is not in the commit (new, or not a repository)

    def name(self, targets: Sequence[str] | None) -> str:
        what = " ".join(targets) if targets else "all stages"
        edited = " + edited params" if self.changed or not self.params_committed else ""
        return f"{what} @ {self.commit[:8]}{edited}"

    def tags(self) -> list[str]:
        out = [f"protocol:{self.protocol}"] if self.protocol else []
        return out + [f"{d}:{s}" for d, s in sorted(self.sources.items())]

    def markdown(self, targets: Sequence[str] | None, params: str) -> str:
        lines = ["# Run provenance", "",
                 f"- Targets: {', '.join(targets) if targets else 'every stage of dvc.yaml'}",
                 f"- Commit: `{self.commit}`",
                 f"- {params} sha256: `{self.params_sha256}`",
                 f"- Protocol: {self.protocol or 'not set'}",
                 "- Data sources: " + (", ".join(f"{d}: {s}" for d, s in sorted(self.sources.items())) or "none")]
        if not self.params_committed:
            lines.append(f"- {params} is not in the commit: every key counts as changed.")
        elif self.changed:
            lines.append(f"- {params} keys that differ from the commit ({len(self.changed)}): "
                         + ", ".join(f"`{k}`" for k in self.changed[:40])
                         + (f" ... {len(self.changed) - 40} more" if len(self.changed) > 40 else ""))
        else:
            lines.append(f"- {params} is as committed.")
        return "\n".join(lines) + "\n"


def _flat(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _flat(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, data


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose value differs, was added or was removed between two params mappings."""
    a, b = dict(_flat(old)), dict(_flat(new))
    absent = object()
    return sorted(k for k in a.keys() | b.keys() if a.get(k, absent) != b.get(k, absent))


def run_provenance(root: str | Path, params: str = "params.yaml") -> RunProvenance:
    root = Path(root).resolve()
    path = root / params
    text = path.read_text(encoding="utf-8")
    commit = git_commit(root)
    protocol, sources, current = None, {}, {}
    try:
        current = parse_yaml(text, str(path))
        loaded = load_params(path)
        if "protocol" in current or "datasets" in current:  # a project with the study's params
            protocol = loaded.protocol
        if "datasets" in loaded.sections:
            sources = {d: str(cfg.source) for d, cfg in loaded.datasets.items()}
    except ConfigError:
        pass  # the flow reports a broken params file itself
    committed = None
    if commit != "unknown":
        committed = subprocess.run(["git", "show", f"HEAD:{Path(params).as_posix()}"], cwd=root,
                                   capture_output=True, text=True)
    changed: list[str] = []
    if committed is not None and committed.returncode == 0:
        try:
            changed = changed_keys(parse_yaml(committed.stdout, f"HEAD:{params}"), current)
        except ConfigError:
            changed = ["(the committed params file is not valid YAML)"]
    return RunProvenance(commit, hashlib.sha256(text.encode()).hexdigest(), protocol, sources, changed,
                         params_committed=committed is not None and committed.returncode == 0)


def run_name() -> str:
    """The flow run's name before it starts (Prefect's `flow_run_name`, so that its first log line, "Beginning
    flow run ...", names it): `prov.name(targets)` from the run's parameters (`root`, `targets`, `params`).
    A project that cannot be read yet gets its targets only; the flow reports the error itself."""
    from prefect.runtime import flow_run


    parameters = flow_run.parameters or {}
    targets = parameters.get("targets")
    root = os.environ.get(WORKER_ROOT_ENV) or parameters.get("root") or "."
    try:
        return run_provenance(root, parameters.get("params") or "params.yaml").name(targets)
    except (OSError, ValueError):
        return " ".join(targets) if targets else "all stages"


def label_run(prov: RunProvenance, targets: Sequence[str] | None, params: str, log: Any) -> None:
    """Name and tag the current flow run after `prov`, and publish the `run-provenance` artifact. A server
    that refuses the update costs the run its label only (logged). The name also goes to the environment
    (multitab.runtime.provenance.FLOW_RUN_ENV) that the stages' `dvc repro` inherits: the entry page names it."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    run_id = flow_run.id
    if run_id is not None:
        os.environ[FLOW_RUN_ENV] = prov.name(targets)
        try:
            with get_client(sync_client=True) as client:
                current = client.read_flow_run(run_id)
                tags = list(dict.fromkeys([*(current.tags or []), *prov.tags()]))
                client.update_flow_run(run_id, name=prov.name(targets), tags=tags)
        except Exception as e:  # noqa: BLE001 - a label is not worth failing the run for
            log.warning("could not name and tag the flow run: %s", e)
    create_markdown_artifact(markdown=prov.markdown(targets, params), key="run-provenance",
                             description="Commit, params hash and changed keys, protocol and data sources of this run.")
