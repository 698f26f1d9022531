"""bench/bench_grounding.py's arithmetic: families, rates, the F1-best threshold."""

from tests.conftest import load_bench

grounding = load_bench("bench_grounding")


def test_a_family_is_the_file_stem_across_formats_and_translations():
    assert grounding.family("html/howto_regex.html") == grounding.family("pdf/howto_regex.pdf") == "howto_regex"
    assert grounding.family("txt/vim_tutor.ja.txt") == grounding.family("txt/vim_tutor.de.txt") == "vim_tutor"
    assert grounding.family("txt/GPL-3.txt") != grounding.family("txt/MPL-2.0.txt")


def test_rates_and_the_f1_best_threshold():
    supported, unsupported = [0.9, 0.8, 0.6, 0.4], [0.7, 0.5, 0.3, 0.2]
    # At 0.65: 2 of 4 supported grounded, 1 unsupported grounded: P 2/3, R 1/2.
    precision, recall, f1 = grounding.rates(supported, unsupported, 0.65)
    assert (round(precision, 4), recall, round(f1, 4)) == (0.6667, 0.5, round(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5), 4))
    threshold, (p, r, f) = grounding.best_threshold(supported, unsupported)
    # 0.4 grounds all 4 supported and 2 unsupported (P 2/3, R 1: F1 0.8); 0.6: 3 and 1 (0.75); 0.8: 2 and 0 (0.667).
    assert threshold == 0.4 and (round(p, 4), r, round(f, 4)) == (0.6667, 1.0, 0.8)
    assert round(grounding.rates(supported, unsupported, 0.6)[2], 4) == 0.75
    assert grounding.rates([], [0.5], 0.1) == (0.0, 0.0, 0.0)
