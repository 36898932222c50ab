"""The class at a glance: a bar per graded cell, the share of the class's graded submissions that passed it."""
import pathlib


def plot(counts: dict, path) -> pathlib.Path | None:
    """Write grade.cell_counts' `counts` as a bar chart (PNG) to `path`; None where there is no graded cell.
    Cells this machine could not grade (speed cells without a GPU) are drawn grey and labelled so."""
    if not counts:
        return None
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    labels = [f"{nb}: {cell}" for nb, cell in counts]
    shares = [e["passed"] / e["of"] * 100 if e["of"] and e["here"] else 0.0 for e in counts.values()]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.2))
    bars = ax.barh(labels, shares, color=["tab:blue" if e["here"] else "lightgrey" for e in counts.values()])
    for bar, e in zip(bars, counts.values()):
        text = f"{e['passed']} of {e['of']}" if e["here"] else "not graded here"
        ax.text(bar.get_width() + 1, bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
    ax.set_xlim(0, 115)
    ax.set_xlabel("graded submissions that passed the cell (full points), %")
    ax.invert_yaxis()  # the notebook's order, top to bottom
    ax.set_title("Each graded cell: how many passed")
    fig.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
