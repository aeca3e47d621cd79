"""Existing DynamoGraphDeployments and recipes -> stackpin profiles (`stackpin import`), and the serving
content two DGDs are compared on (recipe parity, round trips)."""
