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
