# SPDX-License-Identifier: Apache-2.0
"""Link rates as the benchmark scripts take them (the tc forms ops/netns-cluster passes to tbf)."""

_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bits(rate):
    """Bits per second of a rate such as 100mbit or 1gbit; raises ValueError for anything else."""
    text = rate.lower()
    for unit, factor in _UNITS.items():
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]) * factor
            except ValueError:
                break
    raise ValueError(f"a rate must look like 100mbit or 1gbit (got '{rate}')")
