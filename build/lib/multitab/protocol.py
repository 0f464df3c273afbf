"""`protocol` (params.yaml, top level): which source settles the points where the MultiTab paper's text
and the authors' public code disagree. docs/deviations.md lists every such point with both choices.

- ``paper``: where the paper's text states something, follow it; where it is silent, follow the
  authors' code.
- ``authors_code``: follow the authors' code (their selected configurations and preprocessing
  notebook) everywhere, to reproduce their published numbers.

What the switch changes (the rest is the same under both):
- MultiTab-Net on AliExpress: multiple task tokens with the T-not-T mask (paper: every experiment
  after Table 2) vs their configuration's single shared token (multi_token: false);
- MultiTab-Net on MultiTab-Bench: T-not-T (paper) vs their example configuration's mask none;
- MultiTab-Net and SAINT where their configuration says `rope: true` (Higgs, AliExpress,
  MultiTab-Bench): inter-sample attention with rotary positions over the batch (the paper's appendix
  "Inter-Sample Attention" and its Implementation Details, "RoPE within the inter-sample attention
  layers") vs the per-sample mixing that their rotary layer computes;
- the optimizer: Adam with weight decay 1e-5 for every model (the paper's Implementation Details) vs
  their per-model selection (AdamW for several, weight decay 1e-6 on AliExpress, 0 on MultiTab-Bench);
- the Higgs split: first 5 % validation, last 5 % test (paper's text) vs a stratified random
  90 / 5 / 5 split with seed 42 (their notebook): `datasets.<D>.split.authors_code` in params.yaml.
- the MultiTab-Bench study (`make study`): this project's held-out study vs the authors' experiment end
  to end, every factor of the first `attribution.arms` arm whose source is authors_code (A0_authors:
  evaluation on the training rows, a dataset per run seed, raw targets, AdamW with weight decay 0, mask
  none, per-sample mixing, their epoch budget; multitab.config.attribution.study_settings).
The model and optimiser changes are data: hparams/protocol/<protocol>.yaml, laid over every run's
hyperparameter file (multitab.hparams); the split is params.yaml's. `DEFAULT` is the one default of the
whole package (TrainConfig, multitab.hparams.load).
Regression targets are raw under both (the paper is silent; their notebook trains on raw targets);
standardised targets are a separate option (`datasets.<D>.preprocess.targets`, `bench.data.targets`).
"""

from __future__ import annotations

from typing import Literal

Protocol = Literal["paper", "authors_code"]
PROTOCOLS: tuple[str, ...] = ("paper", "authors_code")
DEFAULT: Protocol = "paper"


def check_protocol(protocol: str, where: str = "protocol") -> Protocol:
    if protocol not in PROTOCOLS:
        raise ValueError(f"{where}={protocol!r} must be one of {list(PROTOCOLS)} (see docs/deviations.md)")
    return protocol  # type: ignore[return-value]
