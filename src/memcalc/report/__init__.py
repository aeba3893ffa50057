"""Everything memcalc prints: records (the JSON interface), the estimate's tables and the
plan's answer. The only formatting code."""

from memcalc.report.estimate import render_detail, render_estimate, render_strategies
from memcalc.report.records import JSON_SCHEMA_VERSION, Format, breakdown_record

__all__ = [
    "JSON_SCHEMA_VERSION",
    "Format",
    "breakdown_record",
    "render_detail",
    "render_estimate",
    "render_strategies",
]
