"""A regression suite of your own with Tandem's pytest plugin (tandem/regress/plugin.py;
docs/regression-testing.md).

Each test compiles an operator for a target, checks it against numpy bit for bit and compares its simulated
cycles with the golden file beside this one (golden_cycles/test_regressions/<test>.json): a compiler or spec
change that makes a kernel wrong, or one cycle slower, fails here. Run it with

    pytest examples/testing                          # compare
    pytest examples/testing --tandem-update-golden   # accept new cycles after a reviewed change
"""

import pytest


@pytest.mark.parametrize("config", ["vta-default", "tvm-paper"])
def test_a_resnet_layer_on_vita(tandem_run, assert_bit_exact, golden_cycles, config):
    report = tandem_run("conv2d", "vita", config=config, H=14, W=14, IC=32, OC=32)
    assert_bit_exact(report)
    golden_cycles.check("conv2d 14x14x32 -> 32, 3x3", report.cycles)


def test_a_gemm_and_an_element_wise_op(tandem_run, assert_bit_exact, golden_cycles):
    gemm = tandem_run("gemm", "vita", M=16, N=64, K=64)
    add = tandem_run("add", "diannao", shape=(64, 64))
    for name, report in (("gemm 16x64x64 on vita", gemm), ("add 64x64 on diannao", add)):
        assert_bit_exact(report)
        golden_cycles.check(name, report.cycles)
