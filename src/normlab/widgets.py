"""Knobs to turn: small interactive pictures for the demo notebooks.

Each knob is a class whose ``update(...)`` takes the slider values, computes what the picture
shows (returned as a dict of NumPy values, so tests can check it without a browser) and
redraws a Matplotlib figure. ``widget()`` wraps it in ipywidgets sliders; the figure is shown
as a PNG in an ``ipywidgets.Image``, so it works with any Matplotlib backend and in any
front end that shows ipywidgets (JupyterLab, Notebook 7, VS Code, Colab).

In a notebook::

    from normlab.widgets import SphereKnobs
    SphereKnobs(d=3).widget()

The numbers are computed with a few lines of NumPy written here (population variance,
ε inside the root, as in the chapters), not with the labs' answers.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure

from normlab.plotting import COURSE_STYLE, PALETTE

BLUE, ORANGE, GREEN, RED, PINK = PALETTE[:5]


# The widgets draw with PyTorch's norms (in float64): the labs are where the learner builds them,
# and a function of the package that the labs import must not be an answer of a lab.


def layer_norm(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """x̂ = (x - mean) / sqrt(var + eps) over the last axis, by PyTorch; x: (..., d)."""
    import torch
    import torch.nn.functional as F

    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    return F.layer_norm(x, (x.shape[-1],), eps=eps).numpy()


def rms_norm(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) over the last axis, by PyTorch; x: (..., d)."""
    import torch
    import torch.nn.functional as F

    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    return F.rms_norm(x, (x.shape[-1],), eps=eps).numpy()


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def _new_figure(size: tuple[float, float]) -> Figure:
    import matplotlib as mpl

    with mpl.rc_context(COURSE_STYLE):
        return Figure(figsize=size)


class _Knobs:
    """What every knob shares: a figure, its PNG, and sliders wired to ``update``."""

    figure_size = (6.4, 3.6)
    tight_layout = True

    def __init__(self) -> None:
        self.figure = _new_figure(self.figure_size)
        self.image = None  # the ipywidgets.Image, once widget() has been called
        self.sliders: dict = {}  # name -> slider, once widget() has been called
        self.last: dict = {}
        self._drawn = False

    def controls(self) -> dict:  # pragma: no cover - defined by each knob
        raise NotImplementedError

    def draw(self, values: dict) -> None:  # pragma: no cover - defined by each knob
        raise NotImplementedError

    def compute(self, **settings) -> dict:  # pragma: no cover - defined by each knob
        raise NotImplementedError

    def update(self, **settings) -> dict:
        """Recompute for these slider values and redraw the picture on show; return the numbers."""
        self.last = self.compute(**settings)
        self._drawn = False
        if self.image is not None:
            self.image.value = self.png()
        return self.last

    def png(self) -> bytes:
        """The picture for the last ``update``, as PNG bytes (drawn only when asked for)."""
        import matplotlib as mpl

        if not self._drawn:
            self.figure.clear()
            with mpl.rc_context(COURSE_STYLE):
                self.draw(self.last)
                if self.tight_layout:
                    self.figure.tight_layout()
            self._drawn = True
        return _png(self.figure)

    def widget(self):
        """Sliders and the picture, as one ipywidgets box (display it, or end a cell with it)."""
        import ipywidgets as widgets

        controls = self.sliders = self.controls()
        self.image = widgets.Image(format="png")
        self.update(**{name: control.value for name, control in controls.items()})

        def changed(_change) -> None:
            self.update(**{name: control.value for name, control in controls.items()})

        for control in controls.values():
            control.observe(changed, names="value")
        return widgets.VBox(
            [widgets.HBox(list(controls.values())[:3]), *self._more(controls), self.image]
        )

    @staticmethod
    def _more(controls: dict) -> list:
        import ipywidgets as widgets

        rest = list(controls.values())[3:]
        return [widgets.HBox(rest)] if rest else []


def _slider(description: str, value: float, low: float, high: float, step: float):
    import ipywidgets as widgets

    return widgets.FloatSlider(
        value=value,
        min=low,
        max=high,
        step=step,
        description=description,
        continuous_update=False,
        readout_format=".2f",
        layout=widgets.Layout(width="260px"),
    )


class SphereKnobs(_Knobs):
    """Move a vector x in 2-D or 3-D; see where LayerNorm and RMSNorm send it.

    LayerNorm (γ = 1, β = 0, ε = 0) lands on the sphere of radius √d *inside the plane*
    Σ zᵢ = 0 (for d = 3 a circle, for d = 2 just two points); RMSNorm lands on the whole
    sphere of radius √d, in the direction of x (chapters 03 and 04).
    """

    def __init__(self, d: int = 3) -> None:
        if d not in (2, 3):
            raise ValueError("the picture is drawn for d = 2 or d = 3")
        self.d = d
        self.figure_size = (7.2, 3.6) if d == 2 else (6.0, 5.0)
        self.tight_layout = False  # an equal-aspect plot with its legend beside it
        super().__init__()

    def controls(self) -> dict:
        start = [2.0, 0.5, -1.0][: self.d]
        return {
            f"x{i + 1}": _slider(f"x{i + 1}", value, -3.0, 3.0, 0.1)
            for i, value in enumerate(start)
        }

    def compute(self, **coordinates: float) -> dict:
        x = np.array([coordinates[f"x{i + 1}"] for i in range(self.d)], dtype=np.float64)
        return {
            "x": x,
            "layernorm": layer_norm(x),
            "rmsnorm": rms_norm(x),
            "radius": np.sqrt(self.d),
        }

    def draw(self, values: dict) -> None:
        x, ln, rms, radius = values["x"], values["layernorm"], values["rmsnorm"], values["radius"]
        if self.d == 2:
            ax = self.figure.add_subplot(1, 1, 1)
            angle = np.linspace(0, 2 * np.pi, 200)
            ax.plot(
                radius * np.cos(angle),
                radius * np.sin(angle),
                color=GREEN,
                lw=1,
                label="sphere ‖z‖ = √2 (RMSNorm)",
            )
            line = np.linspace(-3.2, 3.2, 2)
            ax.plot(line, -line, color=ORANGE, lw=1, ls="--", label="plane z₁ + z₂ = 0")
            ax.scatter(
                [1, -1],
                [-1, 1],
                s=60,
                facecolors="none",
                edgecolors=ORANGE,
                label="where LayerNorm can land",
            )
            for point, colour, name in (
                (x, BLUE, "x"),
                (ln, ORANGE, "LN(x)"),
                (rms, GREEN, "RMSNorm(x)"),
            ):
                ax.annotate(
                    "",
                    xy=point,
                    xytext=(0, 0),
                    arrowprops={"arrowstyle": "->", "color": colour, "lw": 2},
                )
                ax.text(*(point * 1.08), name, color=colour, fontsize=9)
            ax.set_xlim(-3.5, 3.5)
            ax.set_ylim(-3.5, 3.5)
            ax.set_aspect("equal")
            ax.set_xlabel("feature 1")
            ax.set_ylabel("feature 2")
            ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
            self.figure.subplots_adjust(left=0.08, right=0.58, bottom=0.14, top=0.9)
        else:
            ax = self.figure.add_subplot(1, 1, 1, projection="3d")
            u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 24), np.linspace(0, np.pi, 12))
            ax.plot_wireframe(
                radius * np.cos(u) * np.sin(v),
                radius * np.sin(u) * np.sin(v),
                radius * np.cos(v),
                color=GREEN,
                lw=0.3,
                alpha=0.5,
            )
            # The LayerNorm circle: radius √3 in the plane orthogonal to (1, 1, 1).
            e1 = np.array([1.0, -1.0, 0.0]) / np.sqrt(2)
            e2 = np.array([1.0, 1.0, -2.0]) / np.sqrt(6)
            angle = np.linspace(0, 2 * np.pi, 200)
            circle = radius * (np.outer(np.cos(angle), e1) + np.outer(np.sin(angle), e2))
            ax.plot(*circle.T, color=ORANGE, lw=2, label="LayerNorm: circle in Σz = 0")
            for point, colour, name in (
                (x, BLUE, "x"),
                (ln, ORANGE, "LN(x)"),
                (rms, GREEN, "RMSNorm(x)"),
            ):
                ax.plot([0, point[0]], [0, point[1]], [0, point[2]], color=colour, lw=2.5)
                ax.scatter(*point, color=colour, s=30)
                ax.text(*(point * 1.1), name, color=colour, fontsize=9)
            ax.plot([], [], color=GREEN, lw=1, label="RMSNorm: sphere ‖z‖ = √3")
            for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
                setter(-3, 3)
            ax.set_box_aspect((1, 1, 1))
            ax.set_xlabel("feature 1")
            ax.set_ylabel("feature 2")
            ax.set_zlabel("feature 3")
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(
            f"‖LN(x)‖ = {np.linalg.norm(ln):.3f}, Σ LN(x) = {ln.sum():+.3f}, "
            f"‖RMSNorm(x)‖ = {np.linalg.norm(rms):.3f}",
            fontsize=9,
        )


class AffineKnobs(_Knobs):
    """Turn γ, β and ε; watch the distribution of LayerNorm's outputs (chapter 03).

    The inputs are 400 tokens of d = 16 features, each token with its own random scale
    (0.01 to 10) and offset, drawn once with a fixed seed. x̂ has mean 0 and variance
    σ²/(σ² + ε) per token; the output γ·x̂ + β has mean β and standard deviation γ times that.
    """

    figure_size = (8.0, 3.4)

    def __init__(self, seed: int = 0, tokens: int = 400, d: int = 16) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        scale = 10 ** rng.uniform(-2, 1, size=(tokens, 1))
        offset = rng.normal(0, 5, size=(tokens, 1))
        self.x = offset + scale * rng.standard_normal((tokens, d))

    def controls(self) -> dict:
        import ipywidgets as widgets

        return {
            "gamma": _slider("γ", 1.0, 0.0, 3.0, 0.05),
            "beta": _slider("β", 0.0, -3.0, 3.0, 0.05),
            "log10_eps": widgets.FloatSlider(
                value=-5.0,
                min=-8.0,
                max=1.0,
                step=0.25,
                description="log₁₀ ε",
                continuous_update=False,
                layout=widgets.Layout(width="260px"),
            ),
        }

    def compute(self, gamma: float, beta: float, log10_eps: float) -> dict:
        eps = 10.0**log10_eps
        y = gamma * layer_norm(self.x, eps) + beta
        return {
            "y": y,
            "eps": eps,
            "mean": float(y.mean()),
            "std": float(y.std()),
            "token_std": y.std(axis=-1),
        }

    def draw(self, values: dict) -> None:
        left, right = self.figure.subplots(1, 2)
        left.hist(self.x.ravel(), bins=80, color=BLUE, alpha=0.8)
        left.set_title("inputs x: each token its own scale and offset", fontsize=9)
        left.set_xlabel("value")
        right.hist(values["y"].ravel(), bins=80, color=ORANGE, alpha=0.8, range=(-7, 7))
        right.set_title(
            f"outputs γ·x̂ + β (ε = {values['eps']:.0e}): mean {values['mean']:+.2f}, "
            f"std {values['std']:.2f}",
            fontsize=9,
        )
        right.set_xlabel("value")


class BatchNoiseKnobs(_Knobs):
    """Change the batch size; watch BatchNorm's batch statistics jitter (chapter 02).

    One feature with mean 3 and standard deviation 2. ``batches`` training batches of size B are
    drawn from it, each with one fixed example x₀ = 5 among its members; each batch has its own
    mean and standard deviation, and BatchNorm in training mode normalizes x₀ with them, so
    the same example comes out differently in every batch. The batch mean scatters with
    standard deviation σ/√B.
    """

    figure_size = (8.0, 3.2)
    population_mean, population_std, example = 3.0, 2.0, 5.0

    def __init__(self, seed: int = 0, batches: int = 300) -> None:
        super().__init__()
        self.seed, self.batches = seed, batches

    def controls(self) -> dict:
        import ipywidgets as widgets

        return {
            "batch_size": widgets.IntSlider(
                value=8,
                min=2,
                max=256,
                step=1,
                description="batch size",
                continuous_update=False,
                layout=widgets.Layout(width="320px"),
            ),
        }

    def compute(self, batch_size: int) -> dict:
        rng = np.random.default_rng(self.seed)
        draws = rng.normal(
            self.population_mean, self.population_std, size=(self.batches, int(batch_size))
        )
        draws[:, 0] = self.example  # x₀ is a member of every batch
        batch_mean = draws.mean(axis=1)
        batch_std = draws.std(axis=1)  # BatchNorm normalizes with the biased variance
        normalized = (self.example - batch_mean) / np.sqrt(batch_std**2 + 1e-5)
        return {
            "batch_size": int(batch_size),
            "batch_mean": batch_mean,
            "batch_std": batch_std,
            "normalized_example": normalized,
            "spread_of_mean": float(batch_mean.std()),
            "sigma_over_sqrt_b": self.population_std / np.sqrt(int(batch_size)),
            "spread_of_output": float(normalized.std()),
        }

    def draw(self, values: dict) -> None:
        axes = self.figure.subplots(1, 3)
        panels = [
            ("batch mean", values["batch_mean"], (0, 6), self.population_mean),
            ("batch std", values["batch_std"], (0, 4), self.population_std),
            (
                "BN output of x₀ = 5",
                values["normalized_example"],
                (-3, 5),
                (self.example - self.population_mean) / self.population_std,
            ),
        ]
        for ax, (title, data, limits, truth), colour in zip(
            axes, panels, (BLUE, GREEN, ORANGE), strict=True
        ):
            ax.hist(np.clip(data, *limits), bins=40, range=limits, color=colour, alpha=0.8)
            ax.axvline(truth, color="black", lw=1, ls="--")
            ax.set_title(f"{title}\nspread {data.std():.3f}", fontsize=9)
            ax.set_yticks([])
        self.figure.suptitle(
            f"{self.batches} batches of size B = {values['batch_size']}, each holding x₀; "
            f"the batch mean scatters by about σ/√B = {values['sigma_over_sqrt_b']:.3f}",
            fontsize=10,
        )


class EpsilonKnobs(_Knobs):
    """Slide ε: inside the root, √(σ² + ε), versus outside, σ + ε (chapter 03).

    A token whose features have standard deviation σ is normalized both ways; the picture shows
    the standard deviation of x̂ as σ sweeps 10⁻¹⁰ … 10², with a marker at the σ of the slider.
    Inside the root x̂ keeps unit size until σ ≈ √ε; outside, until σ ≈ ε.
    """

    def __init__(self, d: int = 64, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        pattern = rng.standard_normal(d)
        self.pattern = (pattern - pattern.mean()) / pattern.std()  # mean 0, std 1 exactly

    def controls(self) -> dict:
        import ipywidgets as widgets

        def log_slider(description: str, value: float, low: float, high: float):
            return widgets.FloatSlider(
                value=value,
                min=low,
                max=high,
                step=0.25,
                description=description,
                continuous_update=False,
                layout=widgets.Layout(width="260px"),
            )

        return {
            "log10_eps": log_slider("log₁₀ ε", -5.0, -10.0, 0.0),
            "log10_sigma": log_slider("log₁₀ σ", -3.0, -9.0, 2.0),
        }

    def normalized_std(self, sigma: np.ndarray | float, eps: float) -> tuple:
        """Std of x̂ for a token of std σ: ε inside the root, and ε added to σ outside it."""
        rows = 3.0 + np.multiply.outer(np.atleast_1d(sigma), self.pattern)  # any offset
        centred = rows - rows.mean(axis=-1, keepdims=True)
        std = np.sqrt((centred**2).mean(axis=-1, keepdims=True))
        inside = centred / np.sqrt(std**2 + eps)
        outside = centred / (std + eps)
        return inside.std(axis=-1), outside.std(axis=-1)

    def compute(self, log10_eps: float, log10_sigma: float) -> dict:
        eps, sigma = 10.0**log10_eps, 10.0**log10_sigma
        sweep = np.logspace(-10, 2, 241)
        inside, outside = self.normalized_std(sweep, eps)
        at_inside, at_outside = self.normalized_std(sigma, eps)
        return {
            "eps": eps,
            "sigma": sigma,
            "sweep": sweep,
            "inside": inside,
            "outside": outside,
            "std_inside": float(at_inside[0]),
            "std_outside": float(at_outside[0]),
        }

    def draw(self, values: dict) -> None:
        ax = self.figure.add_subplot(1, 1, 1)
        ax.loglog(values["sweep"], values["inside"], color=BLUE, label="ε inside: √(σ² + ε)")
        ax.loglog(values["sweep"], values["outside"], color=RED, ls="--", label="ε outside: σ + ε")
        ax.axvline(np.sqrt(values["eps"]), color=BLUE, lw=0.8, ls=":")
        ax.axvline(values["eps"], color=RED, lw=0.8, ls=":")
        ax.scatter(
            [values["sigma"]] * 2,
            [values["std_inside"], values["std_outside"]],
            color=[BLUE, RED],
            zorder=3,
        )
        ax.set_xlim(1e-10, 1e2)
        ax.set_ylim(1e-9, 3)
        ax.set_xlabel("σ of the token's features")
        ax.set_ylabel("std of x̂")
        ax.set_title(
            f"ε = {values['eps']:.0e}, σ = {values['sigma']:.0e}: std of x̂ is "
            f"{values['std_inside']:.3g} (inside), {values['std_outside']:.3g} (outside)",
            fontsize=9,
        )
        ax.legend(loc="lower right")
