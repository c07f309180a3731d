"""The two-PU SoC profile of the operating-point tests (tests/test_operating_points.py, tests/test_dvfs_tables.py):
``big`` with three operating points (1, 1.5 and 2 GHz at 0.7, 0.8 and 1.0 V, 100 us to switch), ``little`` with
one; every number from the profile's one test source."""

TINY_DVFS_PROFILE = """schema_version: 1
name: tiny_dvfs
sources: {dt: "a device tree"}
static_power_w: {value: 1.0, source: dt}
memory_bandwidth_bytes_per_s: {value: 1.0e10, source: dt}
pus:
  big:
    kind: cpu
    cores: 1
    frequency_hz: {value: 2.0e9, source: dt}
    peak_flops: {value: 1.0e10, source: dt}
    precision: fp32
    memory_bandwidth_bytes_per_s: {value: 5.0e9, source: dt}
    efficiency: {other: {value: 0.5, source: dt}}
    op_overhead_s: {value: 1.0e-5, source: dt}
    active_power_w: {value: 3.0, source: dt}
    idle_power_w: {value: 0.2, source: dt}
    operating_points:
      frequency_hz: [1.0e9, 1500000000, 2.0e9]
      voltage_v: [0.7, 0.8, 1.0]
      transition_s: {value: 1.0e-4, source: dt}
      source: dt
  little:
    kind: cpu
    cores: 1
    frequency_hz: {value: 1.0e9, source: dt}
    peak_flops: {value: 4.0e9, source: dt}
    precision: fp32
    memory_bandwidth_bytes_per_s: {value: 3.0e9, source: dt}
    efficiency: {other: {value: 0.5, source: dt}}
    op_overhead_s: {value: 1.0e-5, source: dt}
    active_power_w: {value: 1.0, source: dt}
    idle_power_w: {value: 0.1, source: dt}
transfers:
  default: {alpha_s: {value: 1.0e-5, source: dt}, beta_bytes_per_s: {value: 5.0e9, source: dt}}
"""
