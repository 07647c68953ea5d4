"""The low-precision lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import hints, lab_results, messages, solution_namespace

from normlab.grader import i18n
from normlab.grader.checks import low_precision as lp

HINTS = {function: hints(probes) for function, probes in lp.PROBES.items()}


run = functools.partial(lab_results, "10_low_precision")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def to_bfloat16(x):
    # Round to nearest, ties to even, done in integers on the float32 bit pattern.
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    low, high = bits & 0xFFFF, bits >> 16
    up = (low > 0x8000) | ((low == 0x8000) & (high % 2 == 1))
    return ((high + up) << 16).astype(np.uint32).view(np.float32)


def to_bfloat16_by_search(x):
    # Another style: the two bfloat16 neighbours and the nearer one, ties to the even pattern.
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    down = (bits & np.uint32(0xFFFF0000)).view(np.float32)
    up = ((bits & np.uint32(0xFFFF0000)) + np.uint32(0x10000)).view(np.float32)
    gap_down = np.abs(x.astype(np.float64) - down.astype(np.float64))
    gap_up = np.abs(up.astype(np.float64) - x.astype(np.float64))
    even_down = (down.view(np.uint32) >> np.uint32(16)) % 2 == 0
    take_down = (gap_down < gap_up) | ((gap_down == gap_up) & even_down)
    return np.where(take_down, down, up)


def layernorm(x, gamma, beta, eps=1e-5):
    wide = x.astype(np.float64)  # statistics in float64: more than float32, also right
    centred = wide - wide.mean(axis=-1, keepdims=True)
    y = centred / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + eps)
    return (y * gamma + beta).astype(x.dtype)


def layernorm_shifted(x, gamma, beta, eps=1e-5):
    # The one-pass formula on data shifted by the row's first value: float32, and stable,
    # because the shifted values are of the size of the spread, not of the offset.
    x32 = x.astype(np.float32)
    shifted = x32 - x32[..., :1]
    shift_mean = np.sum(shifted, axis=-1, keepdims=True) / np.float32(x.shape[-1])
    var = np.sum(shifted * shifted, axis=-1, keepdims=True) / np.float32(x.shape[-1])
    var = var - shift_mean * shift_mean
    y = (shifted - shift_mean) / np.sqrt(var + np.float32(eps))
    return (y * gamma.astype(np.float32) + beta.astype(np.float32)).astype(x.dtype)


def rmsnorm(x, gamma, eps=1e-6):
    x32 = np.asarray(x, dtype=np.float32)
    rms = np.sqrt(np.einsum("...i,...i->...", x32, x32)[..., None] / x.shape[-1] + eps)
    return (gamma.astype(np.float32) * (x32 / rms)).astype(x.dtype)


def rmsnorm_bf16(x, gamma, eps=1e-6):
    return to_bfloat16(rmsnorm(x, gamma, eps))


def layernorm_bf16(x, gamma, beta, eps=1e-5):
    return to_bfloat16(layernorm(x, gamma, beta, eps))


def layernorm_bf16_shifted(x, gamma, beta, eps=1e-5):
    return to_bfloat16_by_search(layernorm_shifted(x, gamma, beta, eps))


def merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    # Weighted mean, then the M2 of the union from the deviations of each half's mean.
    count = count_a + count_b
    mean = (count_a * mean_a + count_b * mean_b) / count
    m2 = m2_a + count_a * (mean_a - mean) ** 2 + m2_b + count_b * (mean_b - mean) ** 2
    return mean.astype(np.float32), m2.astype(np.float32)


RIGHT = {
    "lowp_to_bfloat16": to_bfloat16,
    "lowp_layernorm": layernorm,
    "lowp_rmsnorm": rmsnorm,
    "lowp_rmsnorm_bf16": rmsnorm_bf16,
    "lowp_layernorm_bf16": layernorm_bf16,
    "lowp_merge": merge,
    "LOWP_ONEPASS_ANSWER": "a",
    "LOWP_GAIN_ANSWER": "d",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == 20 == lp.LAB.max_score


def test_other_right_styles_get_full_marks():
    results = run(
        lowp_to_bfloat16=to_bfloat16_by_search,
        lowp_layernorm=layernorm_shifted,
        lowp_rmsnorm=rmsnorm,
        lowp_layernorm_bf16=layernorm_bf16_shifted,
    )
    assert messages(results) == ""


# ----------------------------------------------------------------------------- bfloat16 bugs


def truncates(x):
    return (
        (np.asarray(x, np.float32).view(np.uint32) >> 16 << 16).astype(np.uint32).view(np.float32)
    )


def rounds_half_up(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x8000) >> 16) << 16).astype(np.uint32).view(np.float32)


def via_half(x):
    return np.float16(1) * np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (truncates, "truncated"),
        (rounds_half_up, "ties away from zero"),
        (via_half, "rounded to float16"),
    ],
)
def test_bfloat16_bug_is_caught_with_its_hint(buggy, probe):
    with np.errstate(over="ignore"):
        results = run(lowp_to_bfloat16=buggy)
    assert HINTS["lowp_to_bfloat16"][probe] in messages(results)


def test_bfloat16_must_be_exact_not_close():
    # one value a single float32 step away from the right bfloat16 value: within 1e-7 relative,
    # and not a bfloat16 value at all; the rounding is exact arithmetic, so it fails
    def one_step_off(x):
        y = to_bfloat16(x)
        flat = y.reshape(-1)
        flat[-1] = np.nextafter(flat[-1], np.float32(np.inf))
        return y

    assert "lowp_to_bfloat16" in messages(run(lowp_to_bfloat16=one_step_off))


def test_bfloat16_in_float64_is_reported():
    results = run(lowp_to_bfloat16=lambda x: to_bfloat16(x).astype(np.float64))
    assert "dtype is float64" in messages(results)


# ----------------------------------------------------------------------------- LayerNorm bugs


def ln_all_float16(x, gamma, beta, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.var(x, axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + np.float16(eps)) + beta


def ln_one_pass(x, gamma, beta, eps=1e-5):
    x32 = x.astype(np.float32)
    mean = x32.mean(-1, keepdims=True)
    var = np.mean(np.square(x32), -1, keepdims=True) - np.square(mean)
    y = (x32 - mean) / np.sqrt(var + np.float32(eps))
    return (y * gamma + beta).astype(x.dtype)


def ln_cast_stats(x, gamma, beta, eps=1e-5):
    x32 = x.astype(np.float32)
    mean = x32.mean(-1, keepdims=True)
    std = np.sqrt(x32.var(-1, keepdims=True) + np.float32(eps))
    return (x - mean.astype(np.float16)) / std.astype(np.float16) * gamma + beta


def ln_no_eps(x, gamma, beta, eps=1e-5):
    with np.errstate(invalid="ignore", divide="ignore"):
        return layernorm(x, gamma, beta, eps=0.0)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (ln_all_float16, "statistics in float16"),
        (ln_one_pass, "one-pass variance"),
        (ln_cast_stats, "statistics cast before normalizing"),
        (ln_no_eps, "no eps"),
    ],
)
def test_layernorm_bug_is_caught_with_its_hint(buggy, probe):
    with np.errstate(all="ignore"):
        results = run(lowp_layernorm=buggy)
    assert HINTS["lowp_layernorm"][probe] in messages(results)


def test_one_pass_in_float64_is_right_on_these_inputs():
    # the one-pass formula is a float32 problem at these offsets: in float64 it passes, which
    # shows the check grades the precision of the statistics and not the formula's text
    def one_pass64(x, gamma, beta, eps=1e-5):
        wide = x.astype(np.float64)
        var = (wide**2).mean(-1, keepdims=True) - wide.mean(-1, keepdims=True) ** 2
        y = (wide - wide.mean(-1, keepdims=True)) / np.sqrt(var + eps)
        return (y * gamma + beta).astype(x.dtype)

    assert messages(run(lowp_layernorm=one_pass64)) == ""


def test_layernorm_returning_float32_for_float16_is_reported():
    results = run(lowp_layernorm=lambda x, g, b, eps=1e-5: layernorm(x, g, b, eps).astype("f4"))
    assert "dtype is float32 but the input was float16" in messages(results)


def test_the_float16_tolerance_rejects_two_spacings():
    # a right answer moved by two float16 spacings in every entry fails: the tolerance is
    # 2**-10 (|y| + 1), one spacing near |y| = 1, not a loose bound
    def two_ulps(x, gamma, beta, eps=1e-5):
        y = layernorm(x, gamma, beta, eps)
        if y.dtype != np.float16:
            return y
        return np.nextafter(np.nextafter(y, np.float16(np.inf)), np.float16(np.inf))

    assert "max rel error" in messages(run(lowp_layernorm=two_ulps))


# ----------------------------------------------------------------------------- RMSNorm bugs


def rms_half_squares(x, gamma, eps=1e-6):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * gamma


def rms_centred(x, gamma, eps=1e-6):
    centred = x.astype(np.float32) - x.astype(np.float32).mean(-1, keepdims=True)
    return rmsnorm(centred, gamma, eps).astype(x.dtype)


def rms_no_eps(x, gamma, eps=1e-6):
    return rmsnorm(x, gamma, 0.0)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (rms_half_squares, "squares in float16"),
        (rms_centred, "subtracts the mean"),
        (rms_no_eps, "no eps"),
    ],
)
def test_rmsnorm_bug_is_caught_with_its_hint(buggy, probe):
    with np.errstate(all="ignore"):
        results = run(lowp_rmsnorm=buggy)
    assert HINTS["lowp_rmsnorm"][probe] in messages(results)


# ----------------------------------------------------------------------------- bfloat16 RMSNorm bugs


def bf16_truncated(x, gamma, eps=1e-6):
    return truncates(rmsnorm(x, gamma, eps))


def bf16_twice(x, gamma, eps=1e-6):
    x_hat = to_bfloat16(rmsnorm(x, np.ones_like(gamma), eps))
    return to_bfloat16(x_hat * gamma)


@pytest.mark.parametrize(
    "buggy, probe",
    [(bf16_truncated, "truncated to bfloat16"), (bf16_twice, "rounded twice")],
)
def test_bfloat16_rmsnorm_bug_is_caught_with_its_hint(buggy, probe):
    results = run(lowp_rmsnorm_bf16=buggy)
    assert HINTS["lowp_rmsnorm_bf16"][probe] in messages(results)


def test_bfloat16_rmsnorm_left_in_float32_is_told_to_round():
    # float32 results are closer to the exact answer than any bfloat16 value: only the check
    # that every output is a bfloat16 value catches them
    message = messages(run(lowp_rmsnorm_bf16=rmsnorm))
    assert "are not bfloat16 values" in message and "lowp_to_bfloat16" in message


# ----------------------------------------------------------------------------- bfloat16 LayerNorm bugs


def bf16_sum_by_halves(v):
    # a sum whose accumulator is bfloat16: the two halves summed (recursively), then rounded
    if v.shape[-1] == 1:
        return v
    half = v.shape[-1] // 2
    return to_bfloat16(bf16_sum_by_halves(v[..., :half]) + bf16_sum_by_halves(v[..., half:]))


def ln_bf16_accumulated(x, gamma, beta, eps=1e-5):
    n = np.float32(x.shape[-1])
    mu = to_bfloat16(bf16_sum_by_halves(x) / n)
    dev = to_bfloat16(x - mu)
    var = to_bfloat16(bf16_sum_by_halves(to_bfloat16(dev**2)) / n)
    inv = to_bfloat16(np.float32(1) / np.sqrt(to_bfloat16(var + np.float32(eps))))
    return to_bfloat16(to_bfloat16(gamma * to_bfloat16(dev * inv)) + beta)


def ln_bf16_one_pass(x, gamma, beta, eps=1e-5):
    return to_bfloat16(ln_one_pass(x, gamma, beta, eps))


def ln_bf16_cast_stats(x, gamma, beta, eps=1e-5):
    mean = to_bfloat16(x.mean(-1, keepdims=True))
    inv = to_bfloat16(1 / np.sqrt(x.var(-1, keepdims=True) + np.float32(eps)))
    y = to_bfloat16(to_bfloat16(x - mean) * inv)  # normalized in bfloat16
    return to_bfloat16(to_bfloat16(y * gamma) + beta)


def ln_bf16_twice(x, gamma, beta, eps=1e-5):
    x_hat = to_bfloat16(layernorm(x, np.ones_like(gamma), np.zeros_like(beta), eps))
    return to_bfloat16(x_hat * gamma + beta)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (ln_bf16_accumulated, "accumulated in bfloat16"),
        (ln_bf16_one_pass, "one-pass variance"),
        (ln_bf16_cast_stats, "statistics cast before normalizing"),
        (ln_bf16_twice, "rounded twice"),
    ],
)
def test_bfloat16_layernorm_bug_is_caught_with_its_hint(buggy, probe):
    with np.errstate(all="ignore"):
        results = run(lowp_layernorm_bf16=buggy)
    assert HINTS["lowp_layernorm_bf16"][probe] in messages(results)


def test_bfloat16_layernorm_left_in_float32_is_told_to_round():
    message = messages(run(lowp_layernorm_bf16=layernorm))
    assert "are not bfloat16 values" in message and "lowp_to_bfloat16" in message


def test_bfloat16_layernorm_without_eps_fails_on_the_constant_row():
    def no_eps(x, gamma, beta, eps=1e-5):
        with np.errstate(invalid="ignore", divide="ignore"):
            return layernorm_bf16(x, gamma, beta, eps=0.0)

    assert "with a constant row" in messages(run(lowp_layernorm_bf16=no_eps))


def test_the_bfloat16_layernorm_tolerance_rejects_a_whole_spacing():
    # every output moved to its bfloat16 neighbour away from zero: a whole spacing, up to
    # 2**-7 |y|, twice the 2**-8 the rounding allows
    def one_spacing_up(x, gamma, beta, eps=1e-5):
        y = layernorm_bf16(x, gamma, beta, eps)
        return (y.view(np.uint32) + np.uint32(0x10000)).view(np.float32)

    assert "max rel error" in messages(run(lowp_layernorm_bf16=one_spacing_up))


# ----------------------------------------------------------------------------- merge bugs


def merge_equal_means(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    mean = 0.5 * (mean_a + mean_b)
    return mean, merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b)[1]


def merge_swapped(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    mean = (count_b * mean_a + count_a * mean_b) / (count_a + count_b)
    return mean.astype(np.float32), merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b)[1]


def merge_no_between(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    return merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b)[0], m2_a + m2_b


def merge_sums_of_squares(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    count = count_a + count_b
    total = count_a * mean_a + count_b * mean_b
    squares = m2_a + count_a * mean_a**2 + m2_b + count_b * mean_b**2
    return total / count, squares - total**2 / count


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (merge_equal_means, "means weighted equally"),
        (merge_swapped, "weights swapped"),
        (merge_no_between, "between-halves term missing"),
    ],
)
def test_merge_bug_is_caught_with_its_hint(buggy, probe):
    results = run(lowp_merge=buggy)
    assert HINTS["lowp_merge"][probe] in messages(results)


def test_a_merge_through_the_sums_of_squares_fails_at_the_large_offset():
    message = messages(run(lowp_merge=merge_sums_of_squares))
    assert "offset 1000" in message and lp.MERGE_HINT in message
    assert "offset 1:" not in message  # at offset 1 float32 still holds the variance


def test_a_layernorm_one_pass_in_another_order_still_gets_the_offset_hint():
    def one_pass_sums(x, gamma, beta, eps=1e-5):
        x32 = x.astype(np.float32)
        d = np.float32(x.shape[-1])
        mean = np.sum(x32, -1, keepdims=True) / d
        var = np.einsum("...i,...i->...", x32, x32)[..., None] / d - mean**2
        with np.errstate(invalid="ignore"):
            y = (x32 - mean) / np.sqrt(var + np.float32(eps))
        return (y * gamma + beta).astype(x.dtype)

    message = messages(run(lowp_layernorm=one_pass_sums))
    assert "offset 0," not in message and "offset 1" in message  # offset 100 or 1000 fails
    assert HINTS["lowp_layernorm"]["one-pass variance"] in message or lp.LAYERNORM_HINT in message


def test_the_merge_oracle_agrees_with_the_whole_data():
    # the oracle builds a data set with the given summaries; on exact summaries it must give
    # the statistics of the real union
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(3, 10)) + 4, rng.normal(size=(3, 5)) * 2
    summary = [
        (part.mean(-1), ((part - part.mean(-1, keepdims=True)) ** 2).sum(-1)) for part in (a, b)
    ]
    mean, m2 = lp.oracle_merge(10, *summary[0], 5, *summary[1])
    union = np.concatenate([a, b], axis=1)
    assert np.allclose(mean, union.mean(-1), rtol=1e-12)
    assert np.allclose(m2, union.var(-1) * 15, rtol=1e-12)


# ----------------------------------------------------------------------------- practice problems


@pytest.mark.parametrize("name, key", [("LOWP_ONEPASS_ANSWER", "a"), ("LOWP_GAIN_ANSWER", "d")])
def test_each_wrong_letter_gets_its_misconception(name, key):
    why = lp.LOWP_ONEPASS_WHY if name == "LOWP_ONEPASS_ANSWER" else lp.LOWP_GAIN_WHY
    assert sorted(why) == sorted(set("abcd") - {key})
    for letter, misconception in why.items():
        assert misconception in messages(run(**{name: letter}))
    assert messages(run(**{name: key})) == ""
    assert messages(run(**{name: f"{key} or a"})) != ""  # two letters are not an answer


# ----------------------------------------------------------------------------- the solution, changed
# Each mistake written as a change of the solution notebook's own code, checked as the lab's
# check cell checks it: check(function), that function's checks only.

TRUNCATING = (
    "rounded = (bits + 0x7FFF + lowest_kept) & 0xFFFF0000",
    "rounded = bits & 0xFFFF0000",
)


def solution_changed(change):
    return solution_namespace("10_low_precision", replace=change)


@pytest.mark.parametrize("function", ["lowp_rmsnorm_bf16", "lowp_layernorm_bf16"])
def test_a_bfloat16_norm_on_a_truncating_rounding_names_the_rounding_first(function):
    namespace = solution_changed(TRUNCATING)
    results = run(**{function: namespace[function]})
    assert [r.name for r in results] == [c.name for c in lp.LAB.checks if function in c.uses]
    (result,) = results
    assert result.message.split("\n")[0] == (
        "Fix `lowp_to_bfloat16` first: it fails its own check, "
        "“bfloat16: nearest value, ties to even, float32 kept”."
    )
    assert HINTS[function]["truncated to bfloat16"] in result.message
    # the failure is at offset 0: no hint about large offsets
    assert "offset 0" in result.message or function == "lowp_rmsnorm_bf16"
    assert "If only the rows with a large offset fail" not in result.message
    assert i18n.translation(result.message, i18n.catalog("es"))[1] == []


def test_a_bfloat16_norm_right_on_its_own_names_no_other_function():
    namespace = solution_changed(TRUNCATING)
    results = run(
        lowp_layernorm_bf16=layernorm_bf16, lowp_to_bfloat16=namespace["lowp_to_bfloat16"]
    )
    assert [r.passed for r in results] == [False, True]  # the rounding's check, then the norm's


def test_the_between_term_divided_twice_gets_its_own_why_and_no_dtype_advice():
    change = (
        "delta * delta * (count_a * count_b / count)",
        "delta * delta * count_a * count_b / count**2",
    )
    results = run(lowp_merge=solution_changed(change)["lowp_merge"])
    message = messages(results)
    assert "offset 1:" in message
    assert HINTS["lowp_merge"]["between-halves term divided by the count twice"] in message
    assert HINTS["lowp_merge"]["between-halves term missing"] not in message
    assert "float64 here" not in message and lp.MERGE_HINT not in message
    assert i18n.translation(message, i18n.catalog("es"))[1] == []


def test_a_layernorm_wrong_at_offset_0_gets_no_offset_hint():
    def no_beta(x, gamma, beta, eps=1e-5):  # wrong at every offset, matched by no probe
        return layernorm(x, gamma, np.zeros_like(beta), eps)

    results = run(
        lowp_layernorm=no_beta, lowp_layernorm_bf16=lambda *a, **k: to_bfloat16(no_beta(*a, **k))
    )
    at_offset_0 = [r.message for r in results if "offset 0," in r.message]
    assert len(at_offset_0) == 2  # the float16 and the bfloat16 LayerNorm
    assert not any("large offset" in message for message in at_offset_0)
