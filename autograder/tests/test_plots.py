"""hpcdl.plots' interactive pieces redraw what they say they do."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from hpcdl import plots  # noqa: E402


def test_step_through_draws_the_step_the_slider_is_on():
    drawn = []

    def draw(step):
        drawn.append(step)
        return plt.figure()

    widget = plots.step_through(draw, 5, description="step")
    slider = widget.children[0]
    assert (slider.min, slider.max, drawn) == (0, 4, [0])
    slider.value = 3
    slider.value = 4
    assert drawn == [0, 3, 4] and plt.get_fignums() == []  # each figure closed once shown


def test_live_curve_holds_the_values_it_was_given_and_shows_nothing_outside_a_notebook():
    curve = plots.LiveCurve("loss", ylabel="nats", every=0.0)
    curve.update([5.0, 4.0])
    fig = curve.finish([5.0, 4.0, 3.5])
    x, y = fig.axes[0].lines[0].get_data()
    assert list(x) == [1, 2, 3] and list(y) == [5.0, 4.0, 3.5]
    assert curve.handle is None and plt.get_fignums() == []  # no IPython here: nothing displayed, nothing left open
