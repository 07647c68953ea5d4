"""The cost lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import hints, lab_results, messages, told

from normlab.grader.checks import cost
from normlab.grader.probes import number_key

RMS_HINTS = hints(cost.RMS_PROBES)
LAYER_HINTS = hints(cost.LAYER_PROBES)
BYTES_HINTS = hints(cost.BYTES_SLIPS)
INTENSITY_HINTS = hints(cost.INTENSITY_SLIPS)
ROOFLINE_HINTS = hints(cost.ROOFLINE_SLIPS)


run = functools.partial(lab_results, "07_cost")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def rms(x, gamma, eps=1e-5, out=None):
    y = gamma * x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    if out is None:
        return y
    out[...] = y
    return out


def layer(x, gamma, beta, eps=1e-5, out=None):
    mean = np.mean(x, axis=-1, keepdims=True)
    std = np.sqrt(np.mean(np.square(x - mean), axis=-1, keepdims=True) + eps)
    return gamma * (x - mean) / std + beta


# Operation by operation, as the lab lists the naive code: (reads, writes) of full-size arrays.
NAIVE_OPERATIONS = {
    "rmsnorm": [(1, 1), (1, 0), (1, 1), (1, 1)],  # x**2, .mean, x / rms, * gamma
    "layernorm": [(1, 0), (1, 1), (1, 1), (1, 0), (1, 1), (1, 1), (1, 1)],
}


def full_passes(norm, implementation):
    if implementation == "fused":
        return 2
    return sum(reads + writes for reads, writes in NAIVE_OPERATIONS[norm])


def bytes_moved(norm, implementation, n_rows, d, itemsize):
    return full_passes(norm, implementation) * n_rows * d * itemsize


def arithmetic_intensity(norm, implementation, itemsize):
    flops = len(NAIVE_OPERATIONS[norm])  # one FLOP per element per operation listed
    return flops / (full_passes(norm, implementation) * itemsize)


def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    return max(flops / peak_flops, bytes_moved / bandwidth)


def rms_into(x, gamma, eps=1e-5, out=None):
    """A right fused answer in any style: here NumPy, writing into out when it is given."""
    out = np.empty_like(x) if out is None else out
    out[...] = rms(x, gamma, eps)
    return out


def layer_into(x, gamma, beta, eps=1e-5, out=None):
    out = np.empty_like(x) if out is None else out
    out[...] = layer(x, gamma, beta, eps)
    return out


RIGHT = {
    "rmsnorm_two_pass": rms,
    "layernorm_two_pass": layer,
    "rmsnorm_fused": rms_into,
    "layernorm_fused": layer_into,
    "bytes_moved": bytes_moved,
    "arithmetic_intensity": arithmetic_intensity,
    "roofline_time": roofline_time,
    "COST_ANSWER": "d",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert all(r.passed for r in results), messages(results)
    assert sum(r.points for r in results) == cost.LAB.max_score


def test_the_answer_may_be_written_with_parentheses_or_capital():
    for answer in ["(d)", "D", " d "]:
        results = run(COST_ANSWER=answer)
        assert all(r.passed for r in results), answer


@pytest.mark.parametrize("answer", ["a", "b", "c", None, 3])
def test_wrong_answers_fail(answer):
    results = run(COST_ANSWER=answer)
    assert not any(r.passed for r in results)


# ----------------------------------------------------------------------------- RMSNorm bugs


def rms_eps_outside(x, gamma, eps=1e-5, out=None):
    return gamma * x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps)


def rms_sum(x, gamma, eps=1e-5, out=None):
    return gamma * x / np.sqrt(np.einsum("...i,...i->...", x, x)[..., None] + eps)


def rms_centred(x, gamma, eps=1e-5, out=None):
    return layer(x, gamma, 0.0, eps)


def rms_no_gamma(x, gamma, eps=1e-5, out=None):
    return rms(x, np.ones_like(gamma), eps)


def rms_no_sqrt(x, gamma, eps=1e-5, out=None):
    return gamma * x / (np.mean(x * x, axis=-1, keepdims=True) + eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (rms_eps_outside, "eps outside the root"),
        (rms_sum, "sum of squares instead of mean"),
        (rms_centred, "subtracts the mean"),
        (rms_no_gamma, "gamma missing"),
        (rms_no_sqrt, "square root missing"),
    ],
)
def test_rms_bug_is_caught_with_its_hint(buggy, probe):
    results = run(rmsnorm_two_pass=buggy)
    assert not all(r.passed for r in results)
    assert RMS_HINTS[probe] in messages(results)


def test_rms_float32_promoted_to_float64_is_reported():
    def promotes(x, gamma, eps=1e-5, out=None):
        return rms(x.astype(np.float64), gamma, eps)

    text = messages(run(rmsnorm_two_pass=promotes))
    assert "dtype is float64 but the input was float32" in text


def test_rms_that_writes_out_but_returns_nothing_fails():
    def returns_none(x, gamma, eps=1e-5, out=None):
        rms(x, gamma, eps, out if out is not None else np.empty_like(x))

    results = run(rmsnorm_two_pass=returns_none)
    assert not any(r.passed for r in results)
    assert "returned None" in messages(results)


def test_rms_library_call_earns_no_points():
    def library(x, gamma, eps=1e-5, out=None):
        import torch
        import torch.nn.functional as F

        return F.rms_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), eps).numpy()

    results = run(rmsnorm_two_pass=library)
    assert not any(r.passed for r in results)
    assert "from scratch" in messages(results)


# ----------------------------------------------------------------------------- LayerNorm bugs


def layer_eps_outside(x, gamma, beta, eps=1e-5, out=None):
    mean = x.mean(-1, keepdims=True)
    return gamma * (x - mean) / (np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True)) + eps) + beta


def layer_one_pass(x, gamma, beta, eps=1e-5, out=None):
    mean = x.mean(-1, keepdims=True)
    variance = (x * x).mean(-1, keepdims=True) - mean * mean  # in float32 for float32 x
    return (gamma * (x - mean) / np.sqrt(variance.astype(np.float64) + eps) + beta).astype(x.dtype)


def layer_mean_square(x, gamma, beta, eps=1e-5, out=None):
    mean = x.mean(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt((x * x).mean(-1, keepdims=True) + eps) + beta


def layer_no_beta(x, gamma, beta, eps=1e-5, out=None):
    return layer(x, gamma, 0.0 * beta, eps)


def layer_no_gamma(x, gamma, beta, eps=1e-5, out=None):
    return layer(x, np.ones_like(gamma), beta, eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (layer_eps_outside, "eps outside the root"),
        (layer_one_pass, "one-pass variance in float32"),
        (layer_mean_square, "mean square instead of variance"),
        (layer_no_beta, "beta missing"),
        (layer_no_gamma, "gamma missing"),
    ],
)
def test_layer_bug_is_caught_with_its_hint(buggy, probe):
    results = run(layernorm_two_pass=buggy)
    assert not all(r.passed for r in results)
    assert LAYER_HINTS[probe] in messages(results)


def test_one_pass_variance_fails_only_with_the_offset():
    results = {r.name: r for r in run(layernorm_two_pass=layer_one_pass)}
    assert results["LayerNorm two-pass matches torch, (N, d) and (B, L, d)"].passed
    assert not results[
        "LayerNorm two-pass in float32 with an offset of 1e4 (no cancellation)"
    ].passed


def test_float32_centring_passes_the_offset_case():
    def float32_throughout(x, gamma, beta, eps=1e-5, out=None):
        centred = x - x.mean(-1, keepdims=True)
        variance = (centred * centred).mean(-1, keepdims=True)
        return (centred / np.sqrt(variance + np.float32(eps)) * gamma + beta).astype(x.dtype)

    results = run(layernorm_two_pass=float32_throughout)
    assert all(r.passed for r in results), messages(results)


def test_unbiased_variance_fails():
    def unbiased(x, gamma, beta, eps=1e-5, out=None):
        mean = x.mean(-1, keepdims=True)
        return gamma * (x - mean) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta

    assert not all(r.passed for r in run(layernorm_two_pass=unbiased))


# ----------------------------------------------------------------------------- fused norms

FUSED_HINTS = hints(cost.FUSED_LAYER_PROBES)
FUSED_LAYER_CHECKS = [c.name for c in cost.LAB.checks if "layernorm_fused" in c.uses]


def welford_layer(slip=""):
    """LayerNorm with Welford's statistics, a row at a time, with one known slip (or none)."""

    def forward(x, gamma, beta, eps=1e-5, out=None):
        rows = np.asarray(x).reshape(-1, x.shape[-1])
        result = np.empty(rows.shape, x.dtype)
        for index, row in enumerate(rows):
            mean, m2, n = 0.0, 0.0, 0
            for value in row.astype(np.float64):
                n += 1
                delta = value - mean
                if slip == "count":
                    mean += delta / (n + 1)
                elif slip == "d":
                    mean += delta / len(row)
                else:
                    mean += delta / n
                if slip == "old":
                    m2 += delta * delta
                elif slip == "new":
                    m2 += (value - mean) ** 2
                else:
                    m2 += delta * (value - mean)
            variance = m2 / (len(row) - 1) if slip == "unbiased" else m2 / len(row)
            result[index] = gamma * (row - mean) / np.sqrt(variance + eps) + beta
        result = result.reshape(x.shape)
        if out is not None:
            out[...] = result
            return out
        return result

    return forward


def one_sweep_layer(accumulator):
    """E[x^2] - E[x]^2 from sums taken left to right in ``accumulator`` (a Numba-style loop)."""

    def forward(x, gamma, beta, eps=1e-5, out=None):
        rows = np.asarray(x).reshape(-1, x.shape[-1])
        result = np.empty(rows.shape, x.dtype)
        for index, row in enumerate(rows):
            total, total_squares = accumulator(0), accumulator(0)
            for value in row:
                total = accumulator(total + accumulator(value))
                total_squares = accumulator(total_squares + accumulator(value * value))
            mean = float(total) / len(row)
            variance = float(total_squares) / len(row) - mean * mean
            result[index] = gamma * (row - mean) / np.sqrt(variance + eps) + beta
        return result.reshape(x.shape)

    return forward


@pytest.mark.parametrize("probe_name", [probe.name for probe in cost.FUSED_LAYER_PROBES])
def test_fused_layer_probe_fires_with_its_hint(probe_name):
    """Each probe's own computation, written into ``out`` as a fused kernel would."""
    probe = next(p for p in cost.FUSED_LAYER_PROBES if p.name == probe_name)

    def layernorm_fused(x, gamma, beta, eps=1e-5, out=None):
        y = np.asarray(probe.compute(x, gamma, beta, eps))
        if out is None:
            return y.astype(x.dtype)
        out[...] = y
        return out

    assert probe.hint in messages(run(layernorm_fused=layernorm_fused))


def test_welford_and_two_pass_both_get_full_marks():
    for forward in (welford_layer(), layer_into):
        results = [r for r in run(layernorm_fused=forward) if r.name in FUSED_LAYER_CHECKS]
        assert len(results) == 3 and all(r.passed for r in results), messages(results)


@pytest.mark.parametrize(
    "slip, probe",
    [
        ("old", "Welford: old mean in both factors"),
        ("new", "Welford: new mean in both factors"),
        ("count", "Welford: count off by one"),
        ("d", "Welford: divides by d at every step"),
        ("unbiased", "unbiased variance"),
    ],
)
def test_welford_slip_is_caught_with_its_hint(slip, probe):
    results = run(layernorm_fused=welford_layer(slip))
    assert not any(r.passed for r in results if r.name in FUSED_LAYER_CHECKS[:2])
    assert FUSED_HINTS[probe] in messages(results)


@pytest.mark.parametrize("accumulator", [np.float64, np.float32])
def test_one_sweep_variance_is_caught_at_the_offset_only(accumulator):
    results = {r.name: r for r in run(layernorm_fused=one_sweep_layer(accumulator))}
    offset = results[FUSED_LAYER_CHECKS[1]]
    assert "offset" in offset.name and not offset.passed
    assert cost.CANCELLATION_HINT in told(list(results.values()), offset.name)
    if accumulator is np.float64:  # without an offset, float64 sums are accurate enough
        assert results[FUSED_LAYER_CHECKS[0]].passed


def fresh_array(forward):
    """A right answer that never writes into the out it is given."""

    def fused(*args, eps=1e-5, out=None):
        return forward(*args, eps=eps)

    return fused


@pytest.mark.parametrize(
    "name, forward",
    [("rmsnorm_fused", fresh_array(rms_into)), ("layernorm_fused", fresh_array(layer_into))],
)
def test_a_fresh_array_instead_of_out_is_caught(name, forward):
    results = run(**{name: forward})
    failed = [r for r in results if not r.passed]
    assert len(failed) == 1 and "fills the out it is given" in failed[0].name
    assert "the `out` array passed in was not filled" in failed[0].message
    assert "NaN, as before the call" in failed[0].message


def test_rebinding_out_inside_is_caught():
    def rebinds(x, gamma, eps=1e-5, out=None):
        out = np.empty_like(x)  # the caller's buffer is lost
        out[...] = rms(x, gamma, eps)
        return out

    text = messages(run(rmsnorm_fused=rebinds))
    assert "the `out` array passed in was not filled" in text


def test_fused_float32_promoted_is_reported():
    def promotes(x, gamma, eps=1e-5, out=None):
        return rms(x.astype(np.float64), gamma, eps)

    assert "dtype is float64 but the input was float32" in messages(run(rmsnorm_fused=promotes))


@pytest.mark.slow
def test_a_numba_kernel_is_graded_like_any_other():
    numba = pytest.importorskip("numba")

    @numba.njit(parallel=True)
    def rows_kernel(x, gamma, eps, out):
        for row in numba.prange(x.shape[0]):
            total = 0.0
            for value in x[row]:
                total += value * value
            scale = 1.0 / np.sqrt(total / x.shape[1] + eps)
            for j in range(x.shape[1]):
                out[row, j] = x[row, j] * scale * gamma[j]

    def fused(x, gamma, eps=1e-5, out=None):
        out = np.empty_like(x) if out is None else out
        rows_kernel(
            np.ascontiguousarray(x).reshape(-1, x.shape[-1]),
            gamma.astype(x.dtype),
            eps,
            out.reshape(-1, x.shape[-1]),
        )
        return out

    results = [r for r in run(rmsnorm_fused=fused) if "RMSNorm fused" in r.name]
    assert len(results) == 2 and all(r.passed for r in results), messages(results)


def test_problem_3_options_are_alike_in_length():
    """The key does not stand out: at most 25% longer than the longest distractor."""
    import re

    import nbformat
    from conftest import ROOT

    notebook = nbformat.read(ROOT / "solutions" / "07_cost.ipynb", as_version=4)
    text = next(c.source for c in notebook.cells if "## Practice problem 3" in c.source)
    options = {
        letter: " ".join(body.split())
        for letter, body in re.findall(r"^- \((\w)\) (.*?)(?=^- \(|^\s*$)", text, re.M | re.S)
    }
    assert sorted(options) == ["a", "b", "c", "d"]
    key = "d"  # the letter the check accepts (tests/test_practice_problems.py reads it there)
    longest_distractor = max(len(body) for letter, body in options.items() if letter != key)
    assert len(options[key]) <= 1.25 * longest_distractor


@pytest.mark.parametrize("path", ["solutions/07_cost.ipynb", "labs/07_cost.ipynb"])
def test_every_timing_cell_prints_the_machine_state_and_is_not_compared(path):
    """A loaded machine changes any timing: each cell that times (it calls median_seconds or
    time.perf_counter) keeps its output out of nbval and prints the CPUs and load average."""
    import nbformat
    from conftest import ROOT

    notebook = nbformat.read(ROOT / path, as_version=4)
    timing = [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code"
        and ("median_seconds(" in cell.source or "time.perf_counter()" in cell.source)
    ]
    assert len(timing) >= 3  # part 1's timing, the first call, and the fused kernels' timing
    for cell in timing:
        assert "nbval-ignore-output" in cell.metadata.get("tags", []), cell.source[:80]
        assert 'print("machine:", machine_state())' in cell.source, cell.source[:80]


# ----------------------------------------------------------------------------- counting bugs


def bytes_reads_only(norm, implementation, n_rows, d, itemsize):
    if implementation == "fused":
        return n_rows * d * itemsize
    return len(NAIVE_OPERATIONS[norm]) * n_rows * d * itemsize  # every operation reads once


def bytes_elements(norm, implementation, n_rows, d, itemsize):
    return bytes_moved(norm, implementation, n_rows, d, 1)


def bytes_bits(norm, implementation, n_rows, d, itemsize):
    return bytes_moved(norm, implementation, n_rows, d, 8 * itemsize)


def bytes_reduction_writes(norm, implementation, n_rows, d, itemsize):
    extra = 0 if implementation == "fused" else {"rmsnorm": 1, "layernorm": 2}[norm]
    return bytes_moved(norm, implementation, n_rows, d, itemsize) + extra * n_rows * d * itemsize


def bytes_swapped(norm, implementation, n_rows, d, itemsize):
    other = {"fused": "naive", "naive": "fused"}[implementation]
    return bytes_moved(norm, other, n_rows, d, itemsize)


BYTES_BUGS = {
    "reads only": bytes_reads_only,
    "elements, not bytes": bytes_elements,
    "bits, not bytes": bytes_bits,
    "reductions counted as read + write": bytes_reduction_writes,
    "naive and fused swapped": bytes_swapped,
}


@pytest.mark.parametrize("probe", sorted(BYTES_BUGS))
def test_bytes_bug_is_caught_with_its_hint(probe):
    buggy = BYTES_BUGS[probe]
    results = run(bytes_moved=buggy)
    assert not all(r.passed for r in results)
    assert BYTES_HINTS[probe] in messages(results)


def test_bytes_off_by_one_pass_fails():
    def one_more(norm, implementation, n_rows, d, itemsize):
        return bytes_moved(norm, implementation, n_rows, d, itemsize) + n_rows * d * itemsize

    assert not any(r.passed for r in run(bytes_moved=one_more))


def test_bytes_as_numpy_integer_or_float_is_accepted():
    def as_numpy(norm, implementation, n_rows, d, itemsize):
        return np.int64(bytes_moved(norm, implementation, n_rows, d, itemsize))

    def as_float(norm, implementation, n_rows, d, itemsize):
        return float(bytes_moved(norm, implementation, n_rows, d, itemsize))

    for function in (as_numpy, as_float):
        assert all(r.passed for r in run(bytes_moved=function)), function.__name__


def test_bytes_returning_a_string_is_reported():
    results = run(bytes_moved=lambda *args: "201 MB")
    assert not any(r.passed for r in results)


def intensity_inverted(norm, implementation, itemsize):
    return 1.0 / arithmetic_intensity(norm, implementation, itemsize)


def intensity_flops(norm, implementation, itemsize):
    return float(len(NAIVE_OPERATIONS[norm]))


def intensity_fused_bytes(norm, implementation, itemsize):
    return arithmetic_intensity(norm, "fused", itemsize)


def intensity_one_pass(norm, implementation, itemsize):
    return len(NAIVE_OPERATIONS[norm]) / itemsize


INTENSITY_BUGS = {
    "bytes per FLOP": intensity_inverted,
    "FLOPs per element": intensity_flops,
    "fused bytes for every implementation": intensity_fused_bytes,
    "one pass only": intensity_one_pass,
}


@pytest.mark.parametrize("probe", sorted(INTENSITY_BUGS))
def test_intensity_bug_is_caught_with_its_hint(probe):
    buggy = INTENSITY_BUGS[probe]
    results = run(arithmetic_intensity=buggy)
    assert not all(r.passed for r in results)
    assert INTENSITY_HINTS[probe] in messages(results)


def test_intensity_with_swapped_flop_counts_fails():
    def swapped(norm, implementation, itemsize):
        other = {"rmsnorm": "layernorm", "layernorm": "rmsnorm"}[norm]
        return len(NAIVE_OPERATIONS[other]) / (full_passes(norm, implementation) * itemsize)

    assert not any(r.passed for r in run(arithmetic_intensity=swapped))


ROOFLINE_BUGS = {
    "sum of the two times": lambda f, b, p, w: f / p + b / w,
    "smaller of the two times": lambda f, b, p, w: min(f / p, b / w),
    "memory time only": lambda f, b, p, w: b / w,
    "compute time only": lambda f, b, p, w: f / p,
}


@pytest.mark.parametrize("probe", sorted(ROOFLINE_BUGS))
def test_roofline_bug_is_caught_with_its_hint(probe):
    buggy = ROOFLINE_BUGS[probe]
    results = run(roofline_time=buggy)
    assert not all(r.passed for r in results)
    assert ROOFLINE_HINTS[probe] in messages(results)


def keyring() -> set[str]:
    """The keys of the counting checks, from this file's own counting of the lab's code."""
    right = {
        "bytes_moved": bytes_moved,
        "arithmetic_intensity": arithmetic_intensity,
        "roofline_time": roofline_time,
    }
    bugs = {
        "bytes_moved": BYTES_BUGS,
        "arithmetic_intensity": INTENSITY_BUGS,
        "roofline_time": ROOFLINE_BUGS,
    }
    cases = {
        "bytes_moved": cost.BYTES_CASES,
        "arithmetic_intensity": cost.INTENSITY_CASES,
        "roofline_time": cost.ROOFLINE_CASES,
    }
    found = set()
    for function, answer in right.items():
        assert sorted(bugs[function]) == sorted(slip.name for slip in cost.SLIPS[function])
        for args in cases[function]:
            found.add(number_key(function, args, "", answer(*args)))
            for name, buggy in bugs[function].items():
                found.add(number_key(function, args, name, buggy(*args)))
    return found


def test_the_module_keys_this_files_counts():
    expected = keyring()
    keys = sorted(expected)
    ring = "\n".join(" ".join(keys[i : i + 4]) for i in range(0, len(keys), 4))
    assert cost.KEYRING == expected, f"the keys of tests/test_cost_checks.py's counts:\n{ring}"


def test_each_key_survives_a_rounding_slip():
    """A right number computed in another order (7 / 12 / 4 or 7 / 48) may differ in its last
    bits: its key must not. Every graded number is far from a change of its 12th digit."""
    cases = [
        *(bytes_moved(*args) for args in cost.BYTES_CASES),
        *(arithmetic_intensity(*args) for args in cost.INTENSITY_CASES),
        *(roofline_time(*args) for args in cost.ROOFLINE_CASES),
    ]
    for value in map(float, cases):
        near = [value]
        for direction in (-np.inf, np.inf):
            step = value
            for _ in range(4):
                step = np.nextafter(step, direction)
                near.append(step)
        assert len({format(v, ".12g") for v in near}) == 1, value


def test_roofline_in_microseconds_fails():
    results = run(roofline_time=lambda f, b, p, w: 1e6 * max(f / p, b / w))
    assert not any(r.passed for r in results)


def test_h200_numbers_of_the_chapter():
    # (64, 512, 768) float32, fused: 201.3 MB; H200 4.8 TB/s and 67 TFLOP/s FP32.
    n = 64 * 512 * 768
    moved = bytes_moved("rmsnorm", "fused", 64 * 512, 768, 4)
    assert moved == 8 * n == 201_326_592
    assert roofline_time(4 * n, moved, 67e12, 4.8e12) == pytest.approx(41.94e-6, rel=1e-3)
    assert roofline_time(7 * n, moved, 67e12, 4.8e12) == roofline_time(4 * n, moved, 67e12, 4.8e12)


@pytest.mark.isolation
def test_out_is_read_back_across_the_process_boundary(tmp_path):
    """`normlab grade` runs the notebook in a child; the filled `out` must come back from it."""

    import nbformat

    cells = [
        "import numpy as np",
        "def rmsnorm_fused(x, gamma, eps=1e-5, out=None):\n"
        "    y = gamma * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)\n"
        "    return y  # never writes into out",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["normlab"] = {"lab": "07_cost"}
    path = tmp_path / "07_cost.ipynb"
    nbformat.write(notebook, path)
    from conftest import grade_json

    code, data, stderr = grade_json(path)  # in this process; the notebook runs in its own
    assert code == 0, stderr
    (submission,) = data["submissions"]
    checks = {c["name"]: c for c in submission["checks"] if "RMSNorm fused" in c["name"]}
    assert len(checks) == 2
    filled = next(c for name, c in checks.items() if "fills the out" in name)
    assert not filled["passed"]
    assert "the `out` array passed in was not filled" in filled["message"]
    assert all(c["passed"] for name, c in checks.items() if "fills the out" not in name)
