"""Plots for the measurement part of each notebook: bandwidth sweeps and the roofline."""
import sys

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


def plot_bandwidth(sizes, results: dict, *, ceiling_gbps: float | None = None, title: str = ""):
    fig, ax = plt.subplots(figsize=(7, 4))
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
