"""Pictures and pages of bench results: the curve chart and the self-contained HTML report."""
