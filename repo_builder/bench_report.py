"""Writing `repo-builder bench`'s report: ``bench.json``, ``bench.csv``, ``requests.jsonl``, ``bench.png`` and the
terminal table (moved out of :mod:`repo_builder.bench`, which re-exports them, to keep both under 500 lines)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .bench_stats import CSV_COLUMNS, LevelStats, csv_row


def write_report(report: dict[str, Any], output_dir: str | Path) -> dict[str, Path]:
    """Write ``bench.json`` (report without per-request records), ``bench.csv`` (one row per level),
    ``requests.jsonl`` (per-request timings) and ``bench.png`` (latency and throughput against concurrency)
    into ``output_dir``. Returns the paths by kind."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "bench.json",
        "csv": out / "bench.csv",
        "png": out / "bench.png",
        "requests": out / "requests.jsonl",
    }
    summary = {k: v for k, v in report.items() if k != "records"}
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n")
    with paths["csv"].open("w", newline="") as fh:
        speculative = (
            ["acceptance_rate", "tokens_per_step"] if any("speculative" in lv for lv in report["levels"]) else []
        )
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS + ["client_cpu_ms_per_request", *speculative])
        writer.writeheader()
        for level in report["levels"]:
            stats = _stats_from_dict(level)
            row = csv_row(stats)
            row["client_cpu_ms_per_request"] = level.get("client_cpu_ms_per_request", "")
            for key in speculative:
                value = (level.get("speculative") or {}).get(key)
                row[key] = "" if value is None else value
            writer.writerow(row)
    with paths["requests"].open("w") as fh:
        for rec in report.get("records", []):
            fh.write(json.dumps(rec) + "\n")
    plot_levels(
        report["levels"],
        paths["png"],
        title=f"{report['server']['model']} "
        f"({report['settings']['protocol']}, {'stream' if report['settings']['stream'] else 'no stream'})",
    )
    return paths


def _stats_from_dict(level: dict[str, Any]) -> LevelStats:
    from .bench_stats import Distribution

    keys = {f for f in LevelStats.__dataclass_fields__}
    data = {k: v for k, v in level.items() if k in keys}
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        data[name] = Distribution(**level[name])
    return LevelStats(**data)


def plot_levels(levels: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """PNG with latency (ms, left) and throughput (right) against concurrency (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [lv["concurrency"] for lv in levels]

    def series(metric: str, key: str) -> list[float]:
        return [float("nan") if lv[metric][key] is None else lv[metric][key] for lv in levels]

    fig, (ax_lat, ax_thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    for metric, key, style in (
        ("ttft_ms", "p50", "o-"),
        ("ttft_ms", "p99", "o--"),
        ("itl_ms", "p50", "s-"),
        ("e2e_ms", "p50", "^-"),
        ("e2e_ms", "p99", "^--"),
    ):
        ax_lat.plot(xs, series(metric, key), style, label=f"{metric[:-3].upper()} {key}")
    ax_lat.set_xlabel("concurrency (requests in flight)")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_xscale("log", base=2)
    ax_lat.set_xticks(xs, [str(x) for x in xs])
    ax_lat.grid(True, alpha=0.3)
    ax_lat.legend(fontsize=8)
    ax_lat.set_title("latency")
    tok = [float("nan") if lv["output_tokens_per_s"] is None else lv["output_tokens_per_s"] for lv in levels]
    ax_thr.plot(xs, tok, "o-", color="tab:blue", label="output tokens/s")
    ax_thr.set_xlabel("concurrency (requests in flight)")
    ax_thr.set_ylabel("output tokens/s", color="tab:blue")
    ax_thr.set_xscale("log", base=2)
    ax_thr.set_xticks(xs, [str(x) for x in xs])
    ax_thr.grid(True, alpha=0.3)
    ax_req = ax_thr.twinx()
    ax_req.plot(xs, [lv["requests_per_s"] for lv in levels], "s--", color="tab:orange", label="requests/s")
    ax_req.set_ylabel("requests/s", color="tab:orange")
    ax_thr.set_ylim(bottom=0)
    ax_req.set_ylim(bottom=0)
    ax_thr.set_title("throughput")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def format_table(report: dict[str, Any]) -> Any:
    """A rich Table of the levels (ms and per-second figures) for the terminal."""
    from rich.table import Table

    def f(v: Any, digits: int = 1) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    table = Table(
        title=f"{report['server']['model']} over {report['settings']['protocol']}"
        f"{' (stream)' if report['settings']['stream'] else ''}"
    )
    for col in (
        "conc",
        "ok/err",
        "TTFT ms p50/90/99",
        "ITL ms p50/90/99",
        "E2E ms p50/90/99",
        "out tok/s",
        "req/s",
        "client CPU ms/req",
        *(("accepted", "tok/step") if any("speculative" in lv for lv in report["levels"]) else ()),
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for lv in report["levels"]:

        def trio(name: str, lv: dict = lv) -> str:
            d = lv[name]
            return f"{f(d['p50'])}/{f(d['p90'])}/{f(d['p99'])}"

        table.add_row(
            str(lv["concurrency"]),
            f"{lv['completed']}/{lv['errors']}",
            trio("ttft_ms"),
            trio("itl_ms"),
            trio("e2e_ms"),
            f(lv["output_tokens_per_s"]),
            f(lv["requests_per_s"], 2),
            f(lv["client_cpu_ms_per_request"], 2),
            *(
                (f(lv["speculative"]["acceptance_rate"], 3), f(lv["speculative"]["tokens_per_step"], 2))
                if "speculative" in lv
                else ()
            ),
        )
    return table
