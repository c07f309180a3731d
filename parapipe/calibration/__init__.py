"""Fitting the cost model: the roofline to measurements, the pipeline terms to measured runs."""
