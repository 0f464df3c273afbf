"""The paper's tables and figures, as the `aggregate` stage writes them.

- `runs`: reading the training runs (results/runs/<dataset>/<model>/seed<S>/metrics.json) into a `RunSet`;
- `results`: `PaperResults`, the numbers the tables show per dataset and model (seed means, σ, Δm);
- `paper_tables`: Tables 2-10 and the Figure 5/6 data laid out from those numbers;
- `published`: the paper's printed values (the CSV files in `published/`), set beside ours;
- `complexity`: parameters and FLOPs with Table 4's convention (the `complexity` stage);
- `report`, `report_markdown`: everything `aggregate` writes, and results/report.md's Markdown;
- `entry_page`: results/index.html.
"""
