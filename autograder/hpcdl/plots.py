"""Plots for the notebooks: bandwidth sweeps, the roofline, and pictures of how a kernel walks its data.

Every picture function is named plot_* and returns its matplotlib figure.
"""
import json
import math
import pathlib
import sys
import time

import matplotlib.pyplot as plt
from tqdm.auto import tqdm

from .timing import time_function


def bandwidth_sweep(candidates: dict, sizes, bytes_per_element: float) -> dict:
    """GB/s of each candidate at each size.

    candidates maps a label to make(n), which prepares inputs of n elements and returns a
    zero-argument function to time. Returns {label: [GB/s per size]}.
    """
    results = {label: [] for label in candidates}
    for n in tqdm(sizes, desc="sizes", file=sys.stdout):
        for label, make in candidates.items():
            t = time_function(make(n))
            results[label].append(t.gbps(n * bytes_per_element))
    return results


def plot_bandwidth(sizes, results: dict, *, ceiling_gbps: float | None = None, title: str = "", ax=None):
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    else:
        fig = ax.figure
    for label, gbps in results.items():
        ax.plot(sizes, gbps, marker="o", label=label)
    if ceiling_gbps:
        ax.axhline(ceiling_gbps, color="gray", linestyle="--", label=f"copy ceiling {ceiling_gbps:.0f} GB/s")
    ax.set(xscale="log", yscale="log", xlabel="elements", ylabel="GB/s (bytes read + written)", title=title)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return fig


def attainable(intensity: float, peak_flops: float, peak_bandwidth: float) -> float:
    return min(peak_flops, intensity * peak_bandwidth)


def plot_roofline(peak_flops: float, peak_bandwidth: float, points: dict | None = None, *, title: str = ""):
    """Log-log roofline; points maps a label to (intensity FLOP/byte, achieved FLOP/s)."""
    ridge = peak_flops / peak_bandwidth
    xs = [ridge / 1e3 * 10 ** (k / 20) for k in range(121)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [attainable(x, peak_flops, peak_bandwidth) for x in xs], color="black", label="roofline")
    ax.axvline(ridge, color="gray", linestyle=":", label=f"ridge {ridge:.3g} FLOP/B")
    for label, (x, y) in (points or {}).items():
        ax.scatter([x], [y], zorder=3, label=f"{label} ({y / attainable(x, peak_flops, peak_bandwidth):.0%})")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="FLOP/s", title=title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def roofline_explorer(peak_flops: float, peak_bandwidth: float):
    """A slider along the intensity axis that says what this device can attain there."""
    import ipywidgets as widgets

    ridge = peak_flops / peak_bandwidth
    slider = widgets.FloatLogSlider(value=ridge, base=10, min=-2, max=4, step=0.05,
                                    description="FLOP/byte", continuous_update=True)
    label = widgets.HTML()

    def update(change=None):
        x = slider.value
        bound = "memory-bound" if x < ridge else "compute-bound"
        label.value = (f"at {x:.3g} FLOP/byte: at most <b>{attainable(x, peak_flops, peak_bandwidth) / 1e12:.3g} "
                       f"TFLOP/s</b>, {bound} (ridge at {ridge:.3g})")

    slider.observe(update, names="value")
    update()
    return widgets.VBox([slider, label])


def step_through(draw, steps: int, *, description: str = "step"):
    """A slider over steps 0 .. steps - 1; below it, the matplotlib figure that draw(step) returns, redrawn as the
    slider moves (an algorithm replayed one step at a time)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    slider = widgets.IntSlider(value=0, min=0, max=steps - 1, description=description, continuous_update=False)
    shown = widgets.Output()

    def show(change=None):
        with shown:
            shown.clear_output(wait=True)
            fig = draw(slider.value)
            plt.show()
            plt.close(fig)

    slider.observe(show, names="value")
    show()
    return widgets.VBox([slider, shown])


def plot_program_blocks(n_elements: int, block_size: int):
    """An array of n_elements split into blocks of block_size, one colour per program; the lanes of the last
    block that lie past the end are drawn hatched: the mask switches them off."""
    n_programs = math.ceil(n_elements / block_size)
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(min(14, max(7, 1 + 0.32 * n_programs * block_size)), 2.4))
    for i in range(n_programs * block_size):
        p = i // block_size
        inside = i < n_elements
        ax.add_patch(plt.Rectangle((i, 0), 1, 1, facecolor=colors(p % 10) if inside else "white",
                                   edgecolor="black", hatch=None if inside else "//", alpha=0.8 if inside else 1))
        ax.text(i + 0.5, 0.5, str(i), ha="center", va="center", fontsize=7)
    for p in range(n_programs):
        ax.text((p + 0.5) * block_size, 1.25, f"program {p}\noffsets {p * block_size}..{(p + 1) * block_size - 1}",
                ha="center", va="bottom", fontsize=8)
    ax.vlines(n_elements, -0.15, 1.15, color="red", linewidth=2)
    ax.text(n_elements, -0.25, f"n_elements = {n_elements}", color="red", ha="center", va="top", fontsize=8)
    ax.set(xlim=(-0.5, n_programs * block_size + 0.5), ylim=(-0.8, 2.1),
           title=f"grid = cdiv({n_elements}, {block_size}) = {n_programs} programs; hatched lanes: mask is False")
    ax.title.set_fontsize(9)
    ax.axis("off")
    return fig


def recorded_run(path) -> dict:
    """A results file of the course's GPU benchmarks (JSON), as recorded; a notebook keeps its own beside it."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {path} in {pathlib.Path.cwd()}: the notebook reads the file stored beside it, "
                                "so run it from its own folder")
    return json.loads(path.read_text())


def recorded_sweep(rows: list, x: str, skip=()) -> tuple:
    """A recorded sweep (a list of {x: value, label: GB/s, ...}) as (x values, {label: [GB/s per x]})."""
    labels = [k for k in rows[0] if k != x and k not in skip]
    return [row[x] for row in rows], {label: [row[label] for row in rows] for label in labels}


def plot_bandwidth_beside_recorded(sizes, results: dict, ceiling_gbps: float, recorded: dict, *, title: str = ""):
    """This machine's vector-add sweep (left) beside the one recorded on a GPU (right), on the same axes."""
    sweep = recorded["vector_add_sweep"]
    gpu_sizes = [row["n"] for row in sweep]
    gpu = {"reference vector_add": [row["solution_gbps"] for row in sweep],
           "torch.add": [row["torch_add_gbps"] for row in sweep]}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4), sharey=True)
    plot_bandwidth(sizes, results, ceiling_gbps=ceiling_gbps, title=title or "this machine", ax=left)
    plot_bandwidth(gpu_sizes, gpu, ceiling_gbps=recorded["copy_gbps"], ax=right,
                   title=f"{recorded['gpu']}, recorded {recorded['date'][:10]}")
    right.tick_params(labelleft=True)
    return fig


def online_softmax_steps(row, block: int) -> list:
    """(running max, old sum rescaled, this block's sum) after each block of `row`, in float64."""
    m, s, steps = -math.inf, 0.0, []
    for start in range(0, len(row), block):
        values = [float(v) for v in row[start:start + block]]
        new_max = max(m, *values)
        carried = s * math.exp(m - new_max)
        added = sum(math.exp(v - new_max) for v in values)
        steps.append((new_max, carried, added))
        m, s = new_max, carried + added
    return steps


def plot_online_softmax(row, block: int):
    """Top: the row, its blocks and the running maximum after each block. Bottom: the running sum after each
    block, split into the old sum rescaled to the new maximum and the new block's terms."""
    steps = online_softmax_steps(row, block)
    n_blocks = len(steps)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), gridspec_kw={"height_ratios": [3, 2]})
    top.bar(range(len(row)), [float(v) for v in row], color="tab:blue", alpha=0.6, label="x[j]")
    for b, (m, _, _) in enumerate(steps):
        end = min((b + 1) * block, len(row))
        top.hlines(m, b * block - 0.5, end - 0.5, color="tab:red", linewidth=2,
                   label="running max m after the block" if b == 0 else None)
        if b:
            top.axvline(b * block - 0.5, color="gray", linestyle=":")
    top.set(xlabel="column j", ylabel="value", title=f"a row of {len(row)} values in blocks of {block}")
    top.legend(fontsize=8, loc="lower right")
    blocks = range(n_blocks)
    carried = [c for _, c, _ in steps]
    added = [a for _, _, a in steps]
    bottom.bar(blocks, carried, color="tab:orange", label="old s * exp(m_old - m_new)")
    bottom.bar(blocks, added, bottom=carried, color="tab:green", label="sum of exp(b - m_new) over the block")
    total = sum(math.exp(float(v) - steps[-1][0]) for v in row)
    bottom.axhline(total, color="black", linestyle="--", label=f"whole row: sum of exp(x - max) = {total:.3g}")
    bottom.set(xlabel="after block", ylabel="running sum s", xticks=list(blocks), ylim=(0, 1.7 * total))
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def tile_launch_order(n_tiles_m: int, n_tiles_n: int, group_m: int | None = None) -> list:
    """order[i][j]: the program that computes output tile (i, j); row by row, or in groups of group_m tile rows
    walked column by column."""
    order = [[0] * n_tiles_n for _ in range(n_tiles_m)]
    group_m = group_m or 1
    pid = 0
    for first in range(0, n_tiles_m, group_m):
        rows = range(first, min(first + group_m, n_tiles_m))
        if group_m == 1:
            cells = [(first, j) for j in range(n_tiles_n)]
        else:
            cells = [(i, j) for j in range(n_tiles_n) for i in rows]
        for i, j in cells:
            order[i][j] = pid
            pid += 1
    return order


def plot_tile_order(n_tiles_m: int, n_tiles_n: int, group_m: int, running: int):
    """The output tiles numbered in launch order, row by row (left) and grouped (right). The first `running`
    programs are shaded; the title counts the blocks of x (tile rows) and w (tile columns) they need."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (name, order) in zip(axes, [("row by row", tile_launch_order(n_tiles_m, n_tiles_n)),
                                        (f"GROUP_M = {group_m}", tile_launch_order(n_tiles_m, n_tiles_n, group_m))]):
        busy = [(i, j) for i in range(n_tiles_m) for j in range(n_tiles_n) if order[i][j] < running]
        rows, cols = {i for i, _ in busy}, {j for _, j in busy}
        for i in range(n_tiles_m):
            for j in range(n_tiles_n):
                ax.add_patch(plt.Rectangle((j, i), 1, 1, edgecolor="black",
                                           facecolor="tab:orange" if (i, j) in busy else "white"))
                ax.text(j + 0.5, i + 0.5, str(order[i][j]), ha="center", va="center", fontsize=9)
        ax.set(xlim=(0, n_tiles_n), ylim=(n_tiles_m, 0), aspect="equal", xticks=[], yticks=[],
               xlabel="tile column (a block of w's rows)", ylabel="tile row (a block of x's rows)",
               title=f"{name}: programs 0-{running - 1} read\nx blocks: {len(rows)}, w blocks: {len(cols)}, "
                     f"total {len(rows) + len(cols)}")
    fig.tight_layout()
    return fig


def plot_per_world_size(world_sizes, panels: dict, *, title: str = ""):
    """One panel per entry of panels (y-axis label -> {line label: values}), against the number of ranks."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    for ax, (ylabel, lines) in zip(axes[0], panels.items()):
        for label, values in lines.items():
            ax.plot(world_sizes, values, marker="o", label=label)
        ax.set(xlabel="tensor-parallel ranks P", ylabel=ylabel, xticks=list(world_sizes))
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


class LiveCurve:
    """A line plot that follows values as they arrive (a training loss while the model trains). In a notebook it
    is one output, redrawn in place at most every `every` seconds; elsewhere nothing is shown. finish() draws the
    last values and returns the figure (closed, so that the notebook does not show it a second time)."""

    def __init__(self, label: str, *, title: str = "", xlabel: str = "step", ylabel: str = "", every: float = 2.0):
        self.fig, self.ax = plt.subplots(figsize=(7, 3.5))
        (self.line,) = self.ax.plot([], [], label=label)
        self.ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        self.ax.grid(True, alpha=0.3)
        self.ax.legend()
        self.every, self.shown_at, self.handle = every, None, None
        plt.close(self.fig)  # shown through the display handle only

    def update(self, values, force: bool = False) -> None:
        """Draw values (one per step, from step 1) if `every` seconds have passed since the last drawing."""
        self.line.set_data(range(1, len(values) + 1), list(values))
        self.ax.relim()
        self.ax.autoscale_view()
        now = time.monotonic()
        if not force and self.shown_at is not None and now - self.shown_at < self.every:
            return
        self.shown_at = now
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # no IPython, so no notebook (a grading worker may lack it): nothing to draw into
            return
        if get_ipython() is None:  # a plain Python process: no notebook output to draw into
            return
        if self.handle is None:
            self.handle = display(self.fig, display_id=True)
        else:
            self.handle.update(self.fig)

    def finish(self, values):
        self.update(values, force=True)
        return self.fig
