"""Measuring: the Timer interface (in process or through the agent), the measured ``host`` profile, ``soc detect``
and ``profile``."""
